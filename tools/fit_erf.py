#!/usr/bin/python3
"""Fits the polynomial coefficients of the float erf kernel (src/kernels/cpu/unary_simd.cpp, ErfF)
and reports their float32 error. Run with Debian python3 (numpy)."""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
__import__("program").start(__doc__, __name__)
import numpy as np, math
from numpy.polynomial import chebyshev as C
erf=np.vectorize(math.erf); erfc=np.vectorize(math.erfc)
# branch 1: erf(x)/x = P(x^2) on x in [0,1]
xs=np.cos(np.pi*(np.arange(4000)+0.5)/4000)*0.5+0.5  # chebyshev nodes on [0,1]
for deg in (5,6):
    t=xs**2
    A=np.vander(t, deg+1, increasing=True)
    y=erf(xs)/xs
    # weighted least squares for relative error
    c,*_=np.linalg.lstsq(A/ y[:,None], np.ones_like(y), rcond=None)
    xt=np.linspace(1e-6,1,200001)
    approx=np.polyval(c[::-1], xt**2)*xt
    rel=np.abs(approx/erf(xt)-1).max()
    # float32 evaluation
    cf=c.astype(np.float32); x32=xt.astype(np.float32); t32=(x32*x32).astype(np.float32)
    p=np.float32(cf[-1])
    for k in range(deg-1,-1,-1): p=(p*t32+cf[k]).astype(np.float32)
    a32=(p*x32).astype(np.float32)
    ulp=np.abs(a32.astype(np.float64)-erf(x32.astype(np.float64)))/np.spacing(np.abs(erf(x32.astype(np.float64))).astype(np.float32)).astype(np.float64)
    print("branch1 deg",deg,"rel",rel,"max ulp(f32)",ulp.max(), list(c))
# branch 2: log(erfc(x)) = Q(x) on [1, 4]
lo,hi=1.0,3.95
xs2=np.cos(np.pi*(np.arange(4000)+0.5)/4000)*(hi-lo)/2+(hi+lo)/2
for deg in (8,9,10):
    y=np.log(erfc(xs2))
    A=np.vander(xs2, deg+1, increasing=True)
    c,*_=np.linalg.lstsq(A, y, rcond=None)
    xt=np.linspace(lo,hi,200001)
    e=1-np.exp(np.polyval(c[::-1],xt))
    err=np.abs(e-erf(xt)).max()
    cf=c.astype(np.float32); x32=xt.astype(np.float32)
    p=np.float32(cf[-1])
    for k in range(deg-1,-1,-1): p=(p*x32+cf[k]).astype(np.float32)
    e32=(np.float32(1)-np.exp(p.astype(np.float64)).astype(np.float32)).astype(np.float32)
    ulp=np.abs(e32.astype(np.float64)-erf(x32.astype(np.float64)))/np.spacing(np.float32(1.0)/2)
    print("branch2 deg",deg,"abs",err,"max ulp(f32)",ulp.max(), list(c))

# GELU's erf (ErfAbsF): erf(z) = z P(z^2) / Q(z^2) on [0, 4] (clamped beyond), P and Q of degree 5,
# fitted by iteratively reweighted linear least squares on z P - erf(z) (Q - 1) = erf(z).
Z=4.0
zs=np.cos(np.pi*(np.arange(8000)+0.5)/8000)*Z/2+Z/2
w=zs*zs; y=erf(zs); wt=np.ones_like(zs)
for it in range(12):
    A=np.hstack([zs[:,None]*np.vander(w,6,increasing=True), -y[:,None]*np.vander(w,6,increasing=True)[:,1:]])
    c,*_=np.linalg.lstsq(A*wt[:,None], y*wt, rcond=None)
    p=c[:6]; q=np.concatenate([[1.0],c[6:]])
    wt=1/np.abs(np.polyval(q[::-1],w))
x32=np.linspace(-8,8,400001).astype(np.float32)
z32=np.minimum(np.abs(x32),np.float32(Z)); w32=(z32*z32).astype(np.float32)
P=np.float32(p[-1]); Q=np.float32(q[-1])
for k in range(4,-1,-1):
    P=(P*w32+np.float32(p[k])).astype(np.float32); Q=(Q*w32+np.float32(q[k])).astype(np.float32)
e32=np.copysign(np.minimum((z32*P/Q).astype(np.float32),np.float32(1)),x32)
print("ErfAbsF abs error (f32)",np.abs(e32-erf(x32.astype(np.float64))).max())
print("P (highest first)",list(p[::-1])); print("Q (highest first)",list(q[::-1]))
