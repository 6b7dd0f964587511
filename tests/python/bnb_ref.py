"""Float32-exact NumPy transcription of bitsandbytes' NF4 / double-quant / LLM.int8 weight formats,
plus the specification of the files transformers + bitsandbytes write for them.

This module is a *test reference*: it reproduces the codes bitsandbytes produces (same float32
operations in the same order, same tie rules) so that a C++ writer/reader can be checked byte for
byte against it.  It needs only NumPy.

=====================================================================================================
Sources transcribed
=====================================================================================================
(repository / path / commit as stored in the public-source index that was used)

bitsandbytes-foundation/bitsandbytes
  * csrc/cuda/blockwise_quantization.cu   @ 12297f3b6effd3096dd9a39c2110008464e148cc
        dQuantizeNF4 (decision tree), dQuantize<0> (8-bit binary search), kQuantizeBlockwise,
        quantizeBlockwise launch table (blocksize 64 -> <T,64,2,0,NF4>, 256 -> <T,256,2,0,General8bit>)
  * csrc/kernels.cu                       @ c037a306e97ced3c452570132f66aac4e2964056
        same dQuantizeNF4 / dQuantize / kQuantizeBlockwise (older layout), dDequantizeNF4,
        kDequantizeBlockwise
  * csrc/cuda/int8.cu                     @ 12297f3b6effd3096dd9a39c2110008464e148cc
        kInt8VectorQuant (LLM.int8 row-wise quantization)
  * csrc/cpu_ops.cpp                      @ 26ad6904d3f58e0c7da270fb1b5d1d0312aa765e
        (and @ 00289c429dc28a552894bf086e0b1349d07af74f) quantize_cpu: sets code[0] = -1.0f,
        BinSearch + left/right distance check
  * csrc/common.cpp                       @ 332530ba0b16ea18b13f13f345e2d13ec4be04dd
        quantize_block (CPU 8-bit blockwise: absmax via fmax/fabs, x / absmax, nearest, ties left)
  * bitsandbytes/backends/default/ops.py  @ 0155ecc672fc1523ae8dfd6440060f1c404fc8c3
        pure-PyTorch quantize_4bit / dequantize_4bit / quantize_blockwise /
        int8_vectorwise_quant (used on CPU for quantize_4bit: no C++ CPU kernel exists for it)
  * bitsandbytes/backends/cpu/ops.py      @ 883d693a1de0e978199a2aba1e307c285c68006b
        (and @ 03edba00035032e9fd99d7f755f0d4b800a7d739) CPU dispatch: quantize_blockwise fp32 ->
        cquantize_blockwise_cpu_fp32 (= quantize_cpu above)
  * bitsandbytes/backends/utils.py        @ 283b57c81c1b59239699875f1abbdff28ad3e646  (CODE["nf4"])
  * bitsandbytes/functional.py  (modern torch.ops.bitsandbytes version; index file id 7803269854,
        the index did not report its commit; the older @ 01327aa0119fa503ea16322dd72f69f202e4502e
        has the same QuantState code) create_dynamic_map, get_4bit_type, quantize_4bit,
        dequantize_4bit, quantize_blockwise, dequantize_blockwise, int8_vectorwise_dequant,
        QuantState.as_dict / from_dict
  * bitsandbytes/utils.py                 @ 012c660699ccb92bfa97916f1a18bed0980eae00
        pack_dict_to_tensor / unpack_tensor_to_dict, LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING
  * bitsandbytes/nn/modules.py            @ 005a63c2badadd7fb2c45a4b67c1dcbabb72b297
        Params4bit, Linear4bit._save_to_state_dict, Int8Params._quantize (casts to float16 first!),
        Linear8bitLt._save_to_state_dict (SCB + weight_format), maybe_rearrange_weight
  * CMakeLists.txt                        @ 02188cc8159b2fd88fc6765cb29b3a9deb65591a
        CUDA built with --use_fast_math (see "exactness" below)
huggingface/transformers
  * src/transformers/quantizers/quantizer_bnb_4bit.py @ d91fa5a784e416ca685d5ba76d7bc490eb008b33
  * src/transformers/quantizers/quantizer_bnb_8bit.py @ 7cc3a4b062c220f156a9e0a10c7a8055337abc80
  * src/transformers/utils/quantization_config.py     @ 142576881d4a9cc79c35a77e8e7e013024c6eb50
        BitsAndBytesConfig.__init__ / to_dict
pytorch (for torch.linspace, which create_dynamic_map calls)
  * aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp (newest stored version: scalar loop,
        "Remove vectorization implementation, due to the precision issue"; older versions use a
        Vectorized::arange path -- emulated here too and checked against torch 1.13).

=====================================================================================================
(1) NF4 4-bit blockwise quantization  (quantize_4bit(A, blocksize=64, quant_type="nf4"))
=====================================================================================================
NF4 codebook (get_4bit_type("nf4"); float32 of these decimal literals; data.div_(abs max) = /1.0):
    index:  0 -1.0                   8  0.07958029955625534
            1 -0.6961928009986877    9  0.16093020141124725
            2 -0.5250730514526367   10  0.24611230194568634
            3 -0.39491748809814453  11  0.33791524171829224
            4 -0.28444138169288635  12  0.44070982933044434
            5 -0.18477343022823334  13  0.5626170039176941
            6 -0.09105003625154495  14  0.7229568362236023
            7  0.0                  15  1.0
The same literals (with an f suffix) are the CUDA dDequantizeNF4 tree leaves.

Per block of 64 consecutive elements of the row-major flattened weight (CUDA kQuantizeBlockwise):
    absmax = max_i |x_i|                       float32 (fmaxf/fabsf; exact, no rounding)
    r      = 1.0f / absmax                     float32 reciprocal (multiply, NOT divide)
    y_i    = (float)x_i * r                    float32 product
    q_i    = dQuantizeNF4(y_i)                 decision tree, STRICT '>' comparisons against the
                                               float32 constants below (midpoints of neighbouring
                                               code values, computed in double, rounded to float):
        q = number of thresholds t with y > t, with thresholds (ascending)
           -0.8480964004993439f  -0.6106329262256622f  -0.4599952697753906f  -0.33967943489551544f
           -0.23460740596055984f -0.13791173323988914f -0.045525018125772476f 0.03979014977812767f
            0.1202552504837513f   0.2035212516784668f   0.2920137718319893f   0.3893125355243683f
            0.5016634166240692f   0.6427869200706482f   0.8614784181118011f
        => a value EXACTLY equal to float32(threshold) goes to the LOWER code (the '>' is false);
           NaN (every comparison false) -> code 0b0000.
    packing: byte j of the block = (q_{2j} << 4) | q_{2j+1}: the FIRST (even-index) element goes to
             the HIGH nibble, the second (odd) to the low nibble.  Output: uint8, (n+1)//2 bytes.
    absmax is stored as float32, one per block (blocks = ceil(n/64); a partial last block is
    padded with zeros for the absmax/packing, i.e. a pad value quantizes to code 7 (= 0.0)).

All-zero block (absmax == 0): r = 1/0 = +inf, y = 0*inf = NaN -> every code 0 (byte 0x00) and
absmax 0.0.  Dequantization gives -1.0*0 = -0.0 (no NaN).  The CPU/default PyTorch path gives the
same bytes: clamp(NaN) = NaN and torch.argmin over an all-NaN row returns index 0.
With double quantization the block's absmax is only recovered approximately (absmax' =
code[q]*absmax2 + offset, typically a tiny non-zero number, e.g. (1-0.99296875)*offset on CUDA
when the zero block holds the nested block's largest deviation), so an all-zero block then
dequantizes to -absmax' * 1.0 for every element: small, finite, not exactly zero.  (On CPU the
map's code[0] = -1.0 makes that case exactly 0.)

Dequantization (kDequantizeBlockwise / dequantize_4bit, CPU dequantizeBlockwise4bitCpu):
    out[2j]   = NF4[byte >> 4]   * absmax[block]     (float32 multiply, then cast to out dtype)
    out[2j+1] = NF4[byte & 0x0F] * absmax[block]

CPU-produced files (method="cpu" here) use bitsandbytes/backends/default/ops.py instead:
    scaled = clamp(x * (1/absmax), -1, 1)             (float32; 1/absmax IEEE-rounded)
    q      = argmin_k |scaled - NF4[k]|               (float32 distances; torch.argmin returns the
                                                       FIRST minimum = lower index on ties)
    packed = q[0::2] << 4 | q[1::2]                   (same nibble order)
  This differs from the CUDA tree only for y within ~1 ulp of a midpoint (the tree compares with
  float32(exact midpoint), argmin compares float32-rounded distances).

=====================================================================================================
(2) Double quantization of absmax (compress_statistics=True; bnb_4bit_use_double_quant)
=====================================================================================================
functional.quantize_4bit:
    offset = absmax.mean()                          float32 scalar (torch reduction; see notes)
    qabsmax, state2 = quantize_blockwise(absmax - offset, blocksize=256)   (code = dynamic map)
    dequant:  absmax' = dequantize_blockwise(qabsmax, state2) + offset
                      = code[qabsmax[i]] * nested_absmax[i // 256]  (float32 mul)  + offset (f32 add)

Signed dynamic map create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    for i in 0..6:
        b     = torch.linspace(0.1, 1, 2**i + 1, dtype=float32)
        means = (b[:-1] + b[1:]) / 2.0                           (float32)
        data += (10**(i-6) * means)  and  (-(10**(i-6)) * means) (float32 scalar * float32 tensor)
    data += [0, 1.0];  sort ascending  -> 256 float32 values, code[0] = -0.99296875,
    code[127] = 0 ... code[254] = 0.99296875, code[255] = 1.0.   (additional_items = 0 here)
  torch.linspace's float32 rounding depends on the PyTorch build (see DYNAMIC_MAP_VARIANTS: 42-44
  of the 256 entries differ by <= 2 ulp between the kernel variants).  This never matters for compatibility: the map actually
  used is stored in the file ("nested_quant_map") and readers use the stored map.  A writer must
  simply choose its codes against the same map it writes.

quantize_blockwise on CUDA (kQuantizeBlockwise<float,256,2,0,General8bit> + dQuantize<0>):
    absmax2 = max |v| over the (up to) 256 values of the block     (partial last block: only the
                                                                    valid values count)
    y = v * (1.0f / absmax2)                                        (float32)
    binary search: pivot=127, lower_pivot=0, upper_pivot=255, lower=-1, upper=1, val=code[127];
        for i in 64,32,16,8,4,2,1:
            if y > val: lower_pivot=pivot; lower=val; pivot+=i  else: upper_pivot=pivot; upper=val; pivot-=i
            val = code[pivot]
        if upper_pivot == 255: upper = code[255];   if lower_pivot == 0: lower = code[0]
        if y > val:  return upper_pivot if y > (upper+val)*0.5f else pivot
        else:        return lower_pivot if y < (lower+val)*0.5f else pivot
    => nearest code; EXACTLY at a float32 midpoint the result is `pivot` (the final probe, which is
       always an EVEN index), i.e. midpoint ties go to the even index of the pair.  NaN -> 0.
    all-zero block (absmax2 == 0): y = NaN -> code 0, nested_absmax 0, dequant = code[0]*0 + offset
    = offset (no NaN).
quantize_blockwise on CPU (float32 -> csrc quantize_cpu / quantize_block):
    code[0] is overwritten with -1.0f (IN PLACE in bitsandbytes' cached map, so a CPU-made
    file's nested_quant_map[0] is -1.0, a CUDA-made one's is -0.99296875);
    y = v / absmax2 (true float32 division); idx = left neighbour from BinSearch; then
    `if dist_right < dist_left: idx += 1` with float32 |y - code| distances: nearest, ties -> LOWER
    index.  (absmax2 == 0 gives 0/0 = NaN whose index is unspecified; any index dequantizes to
    +-0 + offset.  This module returns 0.)
dequantize_blockwise: code[q] * absmax2[block]   (float32 multiply; CUDA and CPU identical)

=====================================================================================================
(3) LLM.int8 weight format (Int8Params._quantize -> int8_vectorwise_quant)
=====================================================================================================
    B   = W.to(float16)                         !!! the weight is cast to float16 first
    SCB = max_j |B[r, j]|  as float32           (row absmax of the float16 values; exact)
    scale = (1.0f / SCB[r]) * 127.0f            float32: reciprocal, then times 127
    CB  = rint(float(B[r,j]) * scale)  -> int8  round-half-to-EVEN
        default PyTorch path (CPU): torch.round(A * (127.0 / row_stats)); torch evaluates the
        Python-scalar division `127.0 / t` as t.reciprocal() * 127.0 (Tensor.__rdiv__), hence the
        two roundings above; torch.round is half-to-even.  (A is float16, row_stats float32: the
        product is float32.)
        CUDA (kInt8VectorQuant): scale = __fdividef(127.0f, absmax) (fast-math approximation of
        the same 127*(1/absmax)), __float2int_rn(val*scale) = round-half-to-even.
        No truncation, no half-away-from-zero.  Values never exceed +-127 (the absmax element
        maps to exactly +-127).
    all-zero row: SCB = 0, 127/0 = inf, 0*inf = NaN, __float2int_rn(NaN) = 0 -> CB row = 0.
    dequant (int8_vectorwise_dequant): (float(CB) * SCB) * 7.874015718698502e-3   (float32, left to
        right; the constant is rounded to float32 = 0.007874016)
  Note for writers: when transformers loads a pre-quantized int8 weight, Int8Params.to(cuda) calls
  _quantize() again on the int8 data (cast to fp16), i.e. CB := round(CB * 127 / max|CB|) per row,
  and then overwrites SCB with the stored one.  This is the identity only if every non-zero row of
  CB contains +-127 -- which the algorithm above guarantees; a writer must not use another scale.

=====================================================================================================
Serialization (safetensors) written by transformers' save_pretrained with bitsandbytes
=====================================================================================================
4-bit (Linear4bit._save_to_state_dict + QuantState.as_dict(packed=True)), for a Linear with weight
shape [out, in] (n = out*in), prefix P = "<module path>." e.g. "model.layers.0.mlp.up_proj.":
    P+"weight"                     uint8   [ceil(n/2), 1]   packed nibbles (high nibble = even elem)
                                   (bnb_4bit_quant_storage != uint8, e.g. bfloat16: the same bytes
                                    viewed as that dtype, shape [n/(2*itemsize), 1])
    P+"weight.absmax"              float32 [ceil(n/64)]     (compress_statistics=False)
                                   uint8   [ceil(n/64)]     (compress_statistics=True: the 8-bit
                                                             codes qabsmax, NOT floats)
    P+"weight.quant_map"           float32 [16]             NF4 codebook above
    P+"weight.nested_absmax"       float32 [ceil(ceil(n/64)/256)]      (nested only)
    P+"weight.nested_quant_map"    float32 [256]            dynamic map (nested only)
    P+"weight.quant_state.bitsandbytes__nf4"  uint8 [len]   UTF-8 bytes of json.dumps(d) where d
                                   is, in this key order (Python json.dumps defaults: ", " and ": "
                                   separators, no trailing newline):
        {"quant_type": "nf4", "blocksize": 64, "dtype": "<weight dtype before quantization:
         float16|bfloat16|float32>", "shape": [out, in]}
        nested adds:  "nested_blocksize": 256, "nested_dtype": "float32",
                      "nested_offset": <Python float repr of the float32 offset, e.g. 0.0213...>
        (dtype strings come from str(torch.dtype).strip("torch.")).
    P+"bias" (if any) unchanged, in the model dtype.
  Loader (quantizer_bnb_4bit.create_quantized_param): requires the key
  P+"weight.quant_state.bitsandbytes__nf4" (or __fp4); collects every state-dict key containing
  P+"weight." and calls QuantState.from_dict: the JSON is unpacked, prefixes stripped,
  offset = torch.tensor(float(nested_offset)) (float32), and keys must be a subset of
  {absmax, quant_map, nested_absmax, nested_quant_map, quant_state, quant_type, blocksize, dtype,
   shape, nested_blocksize, nested_dtype, nested_offset}.
8-bit (Linear8bitLt._save_to_state_dict):
    P+"weight"         int8    [out, in]   CB
    P+"SCB"            float32 [out]       (key = weight key with "weight" replaced by "SCB")
    P+"weight_format"  uint8   []  (0-dim) value 0 (= "row"; {"row":0,"col32":1,"col_turing":2,
                                   "col_ampere":3}; only "row" is accepted on load)
    P+"bias" unchanged.
config.json "quantization_config" (BitsAndBytesConfig.to_dict(): the instance __dict__ plus
load_in_4bit/load_in_8bit, dtypes as strings), e.g. for NF4 + double quant:
    {"quant_method": "bitsandbytes", "_load_in_8bit": false, "_load_in_4bit": true,
     "llm_int8_threshold": 6.0, "llm_int8_skip_modules": null,
     "llm_int8_enable_fp32_cpu_offload": false, "llm_int8_has_fp16_weight": false,
     "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true,
     "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_storage": "uint8",
     "load_in_4bit": true, "load_in_8bit": false}
  and for LLM.int8: the same keys with "_load_in_8bit": true, "load_in_8bit": true,
  "_load_in_4bit"/"load_in_4bit": false (bnb_4bit_* keep their defaults: "fp4", false, "float32",
  "uint8").  llm_int8_skip_modules is null or a list of module names kept unquantized
  (transformers keeps lm_head unquantized by default).
  Defaults: llm_int8_threshold 6.0, bnb_4bit_quant_type "fp4", bnb_4bit_use_double_quant false,
  bnb_4bit_compute_dtype float32, bnb_4bit_quant_storage uint8.

=====================================================================================================
Exactness notes (what "identical codes" means here)
=====================================================================================================
  * Everything is IEEE float32 in the order above.  Constants are np.float32 (NumPy 1.x promotes
    np.float32 (op) Python float to float64).
  * bitsandbytes' CUDA library is compiled with --use_fast_math, so 1.0f/absmax is rcp.approx
    (<= 1 ulp) and __fdividef(127, absmax) is approximate (<= 2 ulp).  This module uses the IEEE
    reciprocal (and, for int8, (1/SCB)*127 as the default PyTorch path does), so a CUDA-made code
    can differ only for values within a couple of ulps of a decision threshold (NF4 / 8-bit map)
    or of a .5 rounding tie (int8).  The CPU/default paths use IEEE arithmetic and are reproduced
    exactly (checked against a torch run of the transcribed default/ops.py code).
  * offset = torch.mean of the float32 absmax: torch's reduction order is implementation-defined
    (CPU cascade sum vs CUDA tree), so the float32 result may differ by ~1 ulp.  Here it is
    float32(float64 sum / n); pass offset= to reproduce a given file.  The file stores the offset,
    so readers are unaffected.
  * quantize_nf4 takes float32 input.  To emulate a float16/bfloat16 model, round the weights to
    that dtype first (bitsandbytes converts each element exactly to float).
"""
import json

import numpy as np

_f32 = np.float32
_f64 = np.float64

BLOCKSIZE = 64          # 4-bit blocksize (CUDA default; ROCm default is 128)
NESTED_BLOCKSIZE = 256  # hard-coded in functional.quantize_4bit

# ---------------------------------------------------------------------------------------------
# NF4 codebook and the dQuantizeNF4 thresholds
# ---------------------------------------------------------------------------------------------
NF4_CODE = np.array([
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
], dtype=np.float32)

def _f32_literal(text):
    """A C float literal ("0.1f"): the decimal rounded once, directly to the nearest float32 (ties to
    even). np.float32(float(text)) would round twice (decimal -> double -> float) and differs for
    4 of the thresholds below, whose double value is exactly halfway between two floats."""
    from fractions import Fraction
    exact = Fraction(text)
    c = np.float32(float(text))
    cands = [np.nextafter(c, np.float32(-2)), c, np.nextafter(c, np.float32(2))]
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.array(v).view(np.uint32)) & 1))


# float literals of dQuantizeNF4 (written with an f suffix in the kernel), sorted ascending;
# NF4_THRESHOLDS[k] separates code k and k+1.
NF4_THRESHOLDS = np.array([_f32_literal(t) for t in (
    "-0.8480964004993439",
    "-0.6106329262256622",
    "-0.4599952697753906",
    "-0.33967943489551544",
    "-0.23460740596055984",
    "-0.13791173323988914",
    "-0.045525018125772476",
    "0.03979014977812767",
    "0.1202552504837513",
    "0.2035212516784668",
    "0.2920137718319893",
    "0.3893125355243683",
    "0.5016634166240692",
    "0.6427869200706482",
    "0.8614784181118011",
)], dtype=np.float32)


def dquantize_nf4_tree(y):
    """Literal transcription of CUDA dQuantizeNF4 (scalar; y is a float32)."""
    t = NF4_THRESHOLDS
    if y > t[7]:
        if y > t[11]:
            if y > t[13]:
                return 0b1111 if y > t[14] else 0b1110
            return 0b1101 if y > t[12] else 0b1100
        if y > t[9]:
            return 0b1011 if y > t[10] else 0b1010
        return 0b1001 if y > t[8] else 0b1000
    if y > t[3]:
        if y > t[5]:
            return 0b0111 if y > t[6] else 0b0110
        return 0b0101 if y > t[4] else 0b0100
    if y > t[1]:
        return 0b0011 if y > t[2] else 0b0010
    return 0b0001 if y > t[0] else 0b0000


def nf4_codes_tree(y):
    """Vectorised dQuantizeNF4: code = #thresholds t with y > t (strict); NaN -> 0."""
    y = np.asarray(y, dtype=np.float32)
    q = np.searchsorted(NF4_THRESHOLDS, y, side="left")   # number of thresholds < y
    return np.where(np.isnan(y), 0, q).astype(np.uint8)


def nf4_codes_argmin(y, chunk=1 << 20):
    """default/ops.py path: argmin over float32 |clamp(y,-1,1) - NF4|, first index on ties."""
    y = np.clip(np.asarray(y, dtype=np.float32), _f32(-1), _f32(1))   # NaN stays NaN
    flat = y.reshape(-1)
    out = np.empty(flat.size, dtype=np.uint8)
    for s in range(0, flat.size, chunk):
        d = np.abs(flat[s:s + chunk, None] - NF4_CODE)                  # float32
        out[s:s + chunk] = np.argmin(d, axis=-1)                        # all-NaN row -> 0
    return out.reshape(y.shape)


# ---------------------------------------------------------------------------------------------
# create_dynamic_map(signed=True)
# ---------------------------------------------------------------------------------------------
def _fma32(a, b, c):
    """float32 fma(a, b, c): a*b of two floats is exact in double, +c is then exact for the
    magnitudes used here, so one rounding to float32 remains."""
    return _f32(_f64(a) * _f64(b) + _f64(c))


def torch_linspace_f32(start, end, steps, variant="scalar_fma"):
    """torch.linspace(start, end, steps, dtype=float32) on CPU (RangeFactoriesKernel.cpp):
        step = (end - start) / (steps - 1)             (float32)
        idx <  steps//2 : start + step*idx
        idx >= steps//2 : end - step*(steps - idx - 1)
    variant "scalar_fma": newest kernel (serial loop) compiled with FMA contraction (GCC,
        AVX2/AVX512 dispatch): fma(step, idx, start) / fma(-step, n, end).
    variant "scalar": same without contraction.
    variant "vec8_torch113": older kernel (cpu_serial_kernel_vec, AVX2 Vectorized<float>, 8 lanes,
        2 vectors per iteration, scalar tail): vector base via the (contracted) scalar formula at
        the vector's first index, lanes base + k*step (not contracted).  Matches torch 1.13 here.
    """
    start = _f32(start)
    end = _f32(end)
    step = (end - start) / _f32(steps - 1)
    half = steps // 2
    fma = variant != "scalar"

    def scalar(idx):
        if idx < half:
            return _fma32(step, _f32(idx), start) if fma else start + step * _f32(idx)
        n = _f32(steps - idx - 1)
        return _fma32(-step, n, end) if fma else end - step * n

    out = np.empty(steps, dtype=np.float32)
    i = 0
    if variant == "vec8_torch113":
        W = 8
        while i <= steps - 2 * W:
            for _ in range(2):
                base = scalar(i)
                for k in range(W):
                    out[i + k] = base + _f32(k) * step
                i += W
    while i < steps:
        out[i] = scalar(i)
        i += 1
    return out


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8, linspace_variant="scalar_fma"):
    """Transcription of bitsandbytes.functional.create_dynamic_map (float32 tensors throughout)."""
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    i = 0
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                             else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        b = torch_linspace_f32(0.1, 1.0, fraction_items, linspace_variant)
        means = (b[:-1] + b[1:]) / _f32(2.0)
        s = _f32(10.0 ** (-(max_exponent_bits - 1) + i))   # python scalar -> float32 opmath
        data += list(s * means)
        if signed:
            data += list(-s * means)
    if additional_items > 0:
        b = torch_linspace_f32(0.1, 1.0, additional_items + 1, linspace_variant)
        means = (b[:-1] + b[1:]) / _f32(2.0)
        s = _f32(10.0 ** (-(max_exponent_bits - 1) + i))
        data += list(s * means)
        if signed:
            data += list(-s * means)
    data.append(_f32(0.0))
    data.append(_f32(1.0))
    assert len(data) == 2 ** total_bits
    data += [_f32(0.0)] * (256 - len(data))
    return np.sort(np.array(data, dtype=np.float32), kind="stable")


DYNAMIC_MAP_VARIANTS = {v: create_dynamic_map(linspace_variant=v)
                        for v in ("scalar_fma", "scalar", "vec8_torch113")}
# The map as the newest stored PyTorch linspace kernel (serial loop) would create it, ASSUMING GCC
# contracts its a + b*c into an FMA in the AVX2/AVX512 kernel builds (not verifiable here: only
# torch 1.13 is installed, whose vectorised kernel gives the "vec8_torch113" variant, which was
# checked bit-exact).  The variants differ in 42-44 entries by <= 2 ulp; any of them is valid in a
# file because the map is stored with the data (see module doc).
DYNAMIC_MAP_SIGNED = DYNAMIC_MAP_VARIANTS["scalar_fma"]
# What bitsandbytes' CPU kernel turns it into (quantize_cpu writes code[0] = -1.0f in place).
DYNAMIC_MAP_SIGNED_CPU = DYNAMIC_MAP_SIGNED.copy()
DYNAMIC_MAP_SIGNED_CPU[0] = _f32(-1.0)


# ---------------------------------------------------------------------------------------------
# 8-bit blockwise quantization (quantize_blockwise / dequantize_blockwise)
# ---------------------------------------------------------------------------------------------
def dquantize_cuda(code, y):
    """Vectorised transcription of CUDA dQuantize<0>(smem_code, 0.0f, y)."""
    code = np.asarray(code, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    pivot = np.full(y.shape, 127, dtype=np.int64)
    upper_pivot = np.full(y.shape, 255, dtype=np.int64)
    lower_pivot = np.zeros(y.shape, dtype=np.int64)
    lower = np.full(y.shape, -1.0, dtype=np.float32)
    upper = np.full(y.shape, 1.0, dtype=np.float32)
    val = code[pivot]
    i = 64
    while i > 0:
        gt = y > val
        lower_pivot = np.where(gt, pivot, lower_pivot)
        lower = np.where(gt, val, lower)
        upper_pivot = np.where(gt, upper_pivot, pivot)
        upper = np.where(gt, upper, val)
        pivot = np.where(gt, pivot + i, pivot - i)
        val = code[pivot]
        i >>= 1
    upper = np.where(upper_pivot == 255, code[255], upper)
    lower = np.where(lower_pivot == 0, code[0], lower)
    gt = y > val
    mid_up = (upper + val) * _f32(0.5)
    mid_lo = (lower + val) * _f32(0.5)
    res = np.where(gt,
                   np.where(y > mid_up, upper_pivot, pivot),
                   np.where(y < mid_lo, lower_pivot, pivot))
    return res.astype(np.uint8)


def dquantize_cpu(code, y):
    """csrc/common.cpp quantize_block search: left neighbour, then `if (dist_right < dist_left)
    idx += 1` with float32 distances -> nearest, ties to the lower index.  (code[0] must already
    be -1.0 as quantize_cpu sets it.)  NaN -> 0 (unspecified in C)."""
    code = np.asarray(code, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    idx = np.searchsorted(code, y, side="right") - 1          # code[idx] <= y < code[idx+1]
    idx = np.clip(idx, 0, 255)
    nan = np.isnan(y)
    idx[nan] = 0
    nxt = np.minimum(idx + 1, 255)
    dl = np.abs(y - code[idx])
    dr = np.abs(y - code[nxt])
    idx = np.where((idx < 255) & (dr < dl), idx + 1, idx)
    return idx.astype(np.uint8)


def quantize_blockwise(a, code=None, blocksize=NESTED_BLOCKSIZE, method="cuda"):
    """bitsandbytes quantize_blockwise for float32 input.  Returns (codes uint8, absmax float32,
    code actually stored in the QuantState)."""
    a = np.ascontiguousarray(a, dtype=np.float32).reshape(-1)
    if code is None:
        code = DYNAMIC_MAP_SIGNED
    code = np.array(code, dtype=np.float32)
    if method == "cpu":
        code[0] = _f32(-1.0)            # quantize_cpu mutates the (cached) map in place
    n = a.size
    nb = -(-n // blocksize)
    pad = np.zeros(nb * blocksize, dtype=np.float32)
    pad[:n] = a
    blocks = pad.reshape(nb, blocksize)
    absmax = np.abs(blocks).max(axis=1).astype(np.float32)   # pad zeros never exceed |valid|
    with np.errstate(divide="ignore", invalid="ignore"):
        if method == "cuda":
            y = blocks * (_f32(1.0) / absmax)[:, None]
            q = dquantize_cuda(code, y)
        elif method == "cpu":
            y = blocks / absmax[:, None]
            q = dquantize_cpu(code, y)
        else:
            raise ValueError(method)
    return q.reshape(-1)[:n], absmax, code


def dequantize_blockwise(q, absmax, code=None, blocksize=NESTED_BLOCKSIZE):
    """code[q] * absmax[i // blocksize], float32."""
    if code is None:
        code = DYNAMIC_MAP_SIGNED
    code = np.asarray(code, dtype=np.float32)
    q = np.asarray(q, dtype=np.uint8).reshape(-1)
    absmax = np.asarray(absmax, dtype=np.float32).reshape(-1)
    scale = absmax[np.arange(q.size) // blocksize]
    return code[q] * scale


# ---------------------------------------------------------------------------------------------
# NF4 quantize / dequantize
# ---------------------------------------------------------------------------------------------
def _mean_f32(x):
    x = np.asarray(x, dtype=np.float32)
    return _f32(np.sum(x, dtype=np.float64) / x.size)


def quantize_nf4(w, double_quant, method="cuda", offset=None, blocksize=BLOCKSIZE):
    """quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=double_quant).

    w: float32 array, any shape (numel even; normally a multiple of 64).
    method: "cuda" (kQuantizeBlockwise + dQuantizeNF4; nested via dQuantize) or
            "cpu"  (default/ops.py argmin for the 4-bit part; nested via csrc quantize_cpu).
    offset: override the float32 mean used for double quantization (to match a given file).
    Returns dict:
        "packed"  uint8 [ceil(n/2)]             (stored as [ceil(n/2), 1])
        "absmax"  float32 [nblocks]             (only when not double_quant)
        "absmax_q" uint8 [nblocks], "offset" float32 scalar, "nested_absmax" float32
        [ceil(nblocks/256)], "nested_quant_map" float32 [256]   (only when double_quant)
        "quant_map" float32 [16], "shape" tuple
    """
    w = np.asarray(w)
    if w.dtype != np.float32:
        raise TypeError("quantize_nf4 expects float32 (round to fp16/bf16 beforehand if needed)")
    shape = tuple(w.shape)
    x = np.ascontiguousarray(w).reshape(-1)
    n = x.size
    nb = -(-n // blocksize)
    pad = np.zeros(nb * blocksize, dtype=np.float32)
    pad[:n] = x
    blocks = pad.reshape(nb, blocksize)
    absmax = np.abs(blocks).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = _f32(1.0) / absmax                     # 1.0f / local_abs_max
        y = blocks * r[:, None]                    # (float)vals[j] * local_abs_max
    if method == "cuda":
        q = nf4_codes_tree(y)
    elif method == "cpu":
        q = nf4_codes_argmin(y)
    else:
        raise ValueError(method)
    q = q.reshape(-1)[: n + (n & 1)]               # odd n: the pad value (0 -> code 7) fills the last nibble
    packed = ((q[0::2] << 4) | q[1::2]).astype(np.uint8)
    out = {"packed": packed, "quant_map": NF4_CODE.copy(), "shape": shape}
    if not double_quant:
        out["absmax"] = absmax
        return out
    off = _mean_f32(absmax) if offset is None else _f32(offset)
    qa, absmax2, code2 = quantize_blockwise(absmax - off, DYNAMIC_MAP_SIGNED, NESTED_BLOCKSIZE, method)
    out.update({"absmax_q": qa, "offset": off, "nested_absmax": absmax2, "nested_quant_map": code2})
    return out


def dequantize_absmax(d):
    """Per-block float32 absmax of a quantize_nf4 dict (nested: code[q]*absmax2 + offset)."""
    if "absmax" in d:
        return np.asarray(d["absmax"], dtype=np.float32)
    code2 = d.get("nested_quant_map", DYNAMIC_MAP_SIGNED)
    a = dequantize_blockwise(d["absmax_q"], d["nested_absmax"], code2, NESTED_BLOCKSIZE)
    return a + _f32(d["offset"])


def dequantize_nf4(d, shape=None, blocksize=BLOCKSIZE):
    """dequantize_4bit -> float32 array of `shape` (default d["shape"])."""
    if shape is None:
        shape = d["shape"]
    n = int(np.prod(shape))
    absmax = dequantize_absmax(d)
    p = np.asarray(d["packed"], dtype=np.uint8).reshape(-1)
    q = np.empty(p.size * 2, dtype=np.uint8)
    q[0::2] = p >> 4
    q[1::2] = p & 0x0F
    q = q[:n]
    return (NF4_CODE[q] * absmax[np.arange(n) // blocksize]).reshape(shape)


# ---------------------------------------------------------------------------------------------
# LLM.int8 rows
# ---------------------------------------------------------------------------------------------
INT8_DEQUANT_SCALE = _f32(7.874015718698502e-3)   # 1/127 as used by int8_vectorwise_dequant


def quantize_int8_rows(w, cast_fp16=True):
    """Int8Params._quantize: (CB int8 [rows, cols], SCB float32 [rows]).
    cast_fp16=True reproduces bitsandbytes (weight.to(float16) first); False quantizes the float32
    values directly with the same formula."""
    w = np.asarray(w, dtype=np.float32)
    assert w.ndim == 2
    if cast_fp16:
        with np.errstate(over="ignore"):
            w = w.astype(np.float16).astype(np.float32)
    scb = np.abs(w).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        # default/ops.py: A * (127.0 / row_stats); torch evaluates `127.0 / t` as
        # t.reciprocal() * 127.0 (Tensor.__rdiv__).  CUDA's __fdividef(127.0f, absmax) is a
        # fast-math approximation of the same product.
        scale = (_f32(1.0) / scb) * _f32(127.0)
        v = w * scale[:, None]
    v = np.where(np.isnan(v), _f32(0), v)          # __float2int_rn(NaN) = 0 (all-zero rows)
    cb = np.rint(v).astype(np.int8)                # round half to even
    return cb, scb


def dequantize_int8_rows(cb, scb):
    """int8_vectorwise_dequant: (CB * SCB[:,None]) * 7.874015718698502e-3 in float32."""
    cb = np.asarray(cb, dtype=np.int8).astype(np.float32)
    scb = np.asarray(scb, dtype=np.float32)
    return (cb * scb[:, None]) * INT8_DEQUANT_SCALE


# ---------------------------------------------------------------------------------------------
# Serialization helpers (tensor dicts as bitsandbytes/transformers would save them)
# ---------------------------------------------------------------------------------------------
def quant_state_json(d, dtype_name="float32", shape=None, blocksize=BLOCKSIZE):
    """Bytes of the "weight.quant_state.bitsandbytes__nf4" uint8 tensor (pack_dict_to_tensor)."""
    if shape is None:
        shape = d["shape"]
    js = {"quant_type": "nf4", "blocksize": int(blocksize), "dtype": dtype_name,
          "shape": [int(s) for s in shape]}
    if "absmax_q" in d:
        js.update({"nested_blocksize": NESTED_BLOCKSIZE, "nested_dtype": "float32",
                   "nested_offset": float(_f32(d["offset"]))})
    return json.dumps(js).encode("utf-8")


def state_dict_4bit(prefix, d, dtype_name="float32"):
    """{name: np.ndarray} for one Linear4bit weight; prefix like "model.layers.0.mlp.up_proj."."""
    p = prefix + "weight"
    sd = {p: d["packed"].reshape(-1, 1)}
    if "absmax_q" in d:
        sd[p + ".absmax"] = d["absmax_q"]
        sd[p + ".nested_absmax"] = d["nested_absmax"]
        sd[p + ".nested_quant_map"] = d["nested_quant_map"]
    else:
        sd[p + ".absmax"] = d["absmax"]
    sd[p + ".quant_map"] = d["quant_map"]
    sd[p + ".quant_state.bitsandbytes__nf4"] = np.frombuffer(quant_state_json(d, dtype_name),
                                                             dtype=np.uint8).copy()
    return sd


def state_dict_int8(prefix, cb, scb):
    return {prefix + "weight": cb, prefix + "SCB": scb,
            prefix + "weight_format": np.array(0, dtype=np.uint8)}


def quantization_config(kind="nf4", double_quant=True, compute_dtype="float32", skip_modules=None):
    """config.json "quantization_config" as BitsAndBytesConfig.to_dict() produces it."""
    four = kind in ("nf4", "fp4")
    return {
        "quant_method": "bitsandbytes",
        "_load_in_8bit": not four,
        "_load_in_4bit": four,
        "llm_int8_threshold": 6.0,
        "llm_int8_skip_modules": skip_modules,
        "llm_int8_enable_fp32_cpu_offload": False,
        "llm_int8_has_fp16_weight": False,
        "bnb_4bit_quant_type": kind if four else "fp4",
        "bnb_4bit_use_double_quant": bool(double_quant) if four else False,
        "bnb_4bit_compute_dtype": compute_dtype,
        "bnb_4bit_quant_storage": "uint8",
        "load_in_4bit": four,
        "load_in_8bit": not four,
    }
