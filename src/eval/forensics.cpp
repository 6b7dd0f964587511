#include "foundry/eval/forensics.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "foundry/core/error.h"
#include "foundry/eval/metrics.h"
#include "track/png.h"

namespace foundry::eval {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double mean_of_lowest(std::vector<double> v, double k) {
  std::sort(v.begin(), v.end());
  const size_t n = std::max<size_t>(1, size_t(double(v.size()) * k));
  return std::accumulate(v.begin(), v.begin() + std::min(n, v.size()), 0.0) / double(std::min(n, v.size()));
}

double mean_loss(const TokenScores& s) {
  double sum = 0;
  for (float lp : s.logprob) sum -= lp;
  return sum / double(s.logprob.size());
}

}  // namespace

size_t zlib_size(const std::string& text) {
  uLongf size = compressBound(uLong(text.size()));
  std::vector<Bytef> buf(size);
  if (compress2(buf.data(), &size, reinterpret_cast<const Bytef*>(text.data()), uLong(text.size()), 6) != Z_OK)
    raise<Error>("zlib: compress failed");
  return size_t(size);
}

MembershipScores membership_scores(const TokenScores& target, const std::string& text, double k,
                                   const TokenScores* reference) {
  if (target.logprob.empty()) raise<ValueError>("membership scores of an empty document");
  if (!(k > 0 && k <= 1)) raise<ValueError>("membership scores: k must be in (0, 1], got {}", k);
  MembershipScores s;
  s.loss = mean_loss(target);
  s.neg_loss = -s.loss;
  s.zlib = -s.loss / double(zlib_size(text));
  std::vector<double> lp(target.logprob.begin(), target.logprob.end()), z(lp.size());
  for (size_t t = 0; t < lp.size(); ++t)
    z[t] = target.stddev[t] > 0 ? (lp[t] - target.mean[t]) / target.stddev[t] : 0.0;
  s.min_k = mean_of_lowest(lp, k);
  s.min_k_plus_plus = mean_of_lowest(z, k);
  s.reference_ratio = reference && !reference->logprob.empty() ? mean_loss(*reference) / s.loss : kNaN;
  return s;
}

double roc_auc(const std::vector<double>& members, const std::vector<double>& non_members) {
  if (members.empty() || non_members.empty()) raise<ValueError>("roc_auc needs members and non-members");
  // Mann-Whitney U from the members' average ranks among all scores.
  std::vector<double> all = members;
  all.insert(all.end(), non_members.begin(), non_members.end());
  const std::vector<double> rank = average_ranks(all);
  const double n1 = double(members.size()), n0 = double(non_members.size());
  const double rank_sum = std::accumulate(rank.begin(), rank.begin() + std::ptrdiff_t(members.size()), 0.0);
  return (rank_sum - n1 * (n1 + 1) / 2) / (n1 * n0);
}

namespace {

// The regularized incomplete beta function I_x(a, b) by its continued fraction (modified Lentz).
double incomplete_beta(double x, double a, double b) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  if (x > (a + 1) / (a + b + 2)) return 1 - incomplete_beta(1 - x, b, a);
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x)) / a;
  const double tiny = 1e-300;
  double f = 1, c = 1, d = 0;
  for (int i = 0; i <= 400; ++i) {
    const int m = i / 2;
    double num;
    if (i == 0) num = 1;
    else if (i % 2 == 0) num = (m * (b - m) * x) / ((a + 2 * m - 1) * (a + 2 * m));
    else num = -((a + m) * (a + b + m) * x) / ((a + 2 * m) * (a + 2 * m + 1));
    d = 1 + num * d;
    d = std::abs(d) < tiny ? tiny : d;
    d = 1 / d;
    c = 1 + num / c;
    c = std::abs(c) < tiny ? tiny : c;
    const double cd = c * d;
    f *= cd;
    if (std::abs(1 - cd) < 1e-15) break;
  }
  return front * (f - 1);
}

}  // namespace

double student_t_sf(double t, double df) {
  if (std::isnan(t)) return kNaN;
  if (std::isinf(t)) return t > 0 ? 0.0 : 1.0;
  const double tail = 0.5 * incomplete_beta(df / (df + t * t), df / 2, 0.5);
  return t >= 0 ? tail : 1 - tail;
}

WelchTest welch_t_test(const std::vector<double>& suspect, const std::vector<double>& unseen) {
  if (suspect.size() < 2 || unseen.size() < 2) raise<ValueError>("Welch's t-test needs at least 2 scores in each set");
  const double m1 = mean(suspect), m2 = mean(unseen);
  // Each set's squared standard error: its sample variance over its size.
  const double a = std::pow(mean_stderr(suspect), 2), b = std::pow(mean_stderr(unseen), 2);
  WelchTest w;
  w.t = (m1 - m2) / std::sqrt(a + b);
  w.df = (a + b) * (a + b) / (a * a / double(suspect.size() - 1) + b * b / double(unseen.size() - 1));
  w.p_value = student_t_sf(w.t, w.df);
  return w;
}

std::vector<std::vector<double>> zscore_columns(const std::vector<std::vector<double>>& m) {
  std::vector<std::vector<double>> out = m;
  if (m.empty()) return out;
  for (size_t c = 0; c < m[0].size(); ++c) {
    double mu = 0, ss = 0;
    for (const auto& row : m) mu += row[c];
    mu /= double(m.size());
    for (const auto& row : m) ss += (row[c] - mu) * (row[c] - mu);
    const double sd = std::sqrt(ss / double(m.size()));
    for (auto& row : out) row[c] = sd > 0 ? (row[c] - mu) / sd : 0.0;
  }
  return out;
}

double cosine_distance(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  if (aa == 0 || bb == 0) return 0.0;
  return std::max(0.0, 1 - ab / std::sqrt(aa * bb));
}

Linkage average_linkage(const std::vector<std::vector<double>>& rows) {
  const size_t n = rows.size();
  Linkage out;
  if (n == 0) return out;
  // Cluster members and pairwise average distances (UPGMA), n small: the O(n^3) way.
  std::vector<std::vector<size_t>> members(n);
  std::vector<size_t> id(n), active;
  for (size_t i = 0; i < n; ++i) members[i] = {i}, id[i] = i, active.push_back(i);
  std::vector<std::vector<double>> d(n, std::vector<double>(n));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) d[i][j] = cosine_distance(rows[i], rows[j]);
  auto cluster_distance = [&](size_t a, size_t b) {
    double sum = 0;
    for (size_t x : members[a])
      for (size_t y : members[b]) sum += d[x][y];
    return sum / double(members[a].size() * members[b].size());
  };
  std::vector<std::vector<size_t>> children(2 * n - 1);
  size_t next = n;
  while (active.size() > 1) {
    size_t ba = 0, bb = 1;
    double best = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < active.size(); ++i)
      for (size_t j = i + 1; j < active.size(); ++j) {
        const double dist = cluster_distance(active[i], active[j]);
        if (dist < best) best = dist, ba = i, bb = j;
      }
    const size_t a = active[ba], b = active[bb];
    const size_t lo = std::min(id[a], id[b]), hi = std::max(id[a], id[b]);
    out.merges.push_back({double(lo), double(hi), best, double(members[a].size() + members[b].size())});
    children[next] = {lo, hi};
    members[a].insert(members[a].end(), members[b].begin(), members[b].end());
    id[a] = next++;
    active.erase(active.begin() + std::ptrdiff_t(bb));
  }
  // Leaf order: the tree walked left (first) child first, as SciPy's leaves_list.
  std::vector<size_t> stack{next - 1};
  while (!stack.empty()) {
    const size_t c = stack.back();
    stack.pop_back();
    if (c < n) {
      out.order.push_back(c);
      continue;
    }
    stack.push_back(children[c][1]);
    stack.push_back(children[c][0]);
  }
  return out;
}

std::string fingerprint_png(const std::vector<std::vector<double>>& z, const Linkage& link) {
  const int64_t rows = int64_t(z.size()), cols = z.empty() ? 0 : int64_t(z[0].size());
  const int64_t cell = 24, dendro = 120, pad = 8;
  const int64_t width = pad + dendro + cols * cell + pad, height = pad + std::max<int64_t>(1, rows) * cell + pad;
  std::vector<uint8_t> px(size_t(width * height * 3), 255);
  auto put = [&](int64_t x, int64_t y, uint8_t r, uint8_t g, uint8_t b) {
    if (x < 0 || y < 0 || x >= width || y >= height) return;
    uint8_t* p = &px[size_t((y * width + x) * 3)];
    p[0] = r, p[1] = g, p[2] = b;
  };
  std::vector<int64_t> row_of(static_cast<size_t>(rows));
  for (size_t i = 0; i < link.order.size(); ++i) row_of[link.order[i]] = int64_t(i);
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t d = 0; d < cols; ++d) {
      const double v = std::clamp(z[size_t(m)][size_t(d)] / 2.0, -1.0, 1.0);  // +-2 sd saturate
      const uint8_t r = uint8_t(v > 0 ? 255 : 255 * (1 + v)), b = uint8_t(v < 0 ? 255 : 255 * (1 - v));
      const uint8_t g = uint8_t(255 * (1 - std::abs(v)));
      for (int64_t y = 1; y < cell - 1; ++y)
        for (int64_t x = 1; x < cell - 1; ++x) put(pad + dendro + d * cell + x, pad + row_of[size_t(m)] * cell + y, r, g, b);
    }
  // Dendrogram: each cluster at (x by merge distance, y at the mean of its children).
  double top = 1e-12;
  for (const auto& mg : link.merges) top = std::max(top, mg[2]);
  std::vector<std::pair<double, double>> pos(size_t(rows) + link.merges.size());  // (x, y)
  for (int64_t m = 0; m < rows; ++m) pos[size_t(m)] = {double(pad + dendro), double(pad + row_of[size_t(m)] * cell + cell / 2)};
  auto hline = [&](double x0, double x1, double y) {
    for (int64_t x = int64_t(std::min(x0, x1)); x <= int64_t(std::max(x0, x1)); ++x) put(x, int64_t(y), 0, 0, 0);
  };
  auto vline = [&](double x, double y0, double y1) {
    for (int64_t y = int64_t(std::min(y0, y1)); y <= int64_t(std::max(y0, y1)); ++y) put(int64_t(x), y, 0, 0, 0);
  };
  for (size_t i = 0; i < link.merges.size(); ++i) {
    const auto& mg = link.merges[i];
    const auto a = pos[size_t(mg[0])], b = pos[size_t(mg[1])];
    const double x = double(pad + dendro) - (mg[2] / top) * double(dendro - 4);
    hline(a.first, x, a.second);
    hline(b.first, x, b.second);
    vline(x, a.second, b.second);
    pos[size_t(rows) + i] = {x, (a.second + b.second) / 2};
  }
  return track::encode_png(px.data(), height, width, 3);
}


std::vector<double> least_squares(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  if (n == 0 || y.size() != n) raise<ValueError>("least squares: {} rows of X but {} targets", n, y.size());
  const size_t p = x[0].size();
  for (const auto& row : x)
    if (row.size() != p) raise<ValueError>("least squares: rows of X have different lengths");
  // Center (the intercept is not penalized), then the minimum-norm solution through the smaller of
  // the two Gram matrices with a vanishing ridge.
  std::vector<double> xm(p, 0.0);
  double ym = 0;
  for (size_t i = 0; i < n; ++i) {
    ym += y[i];
    for (size_t j = 0; j < p; ++j) xm[j] += x[i][j];
  }
  ym /= double(n);
  for (double& v : xm) v /= double(n);
  std::vector<std::vector<double>> xc(n, std::vector<double>(p));
  std::vector<double> yc(n);
  for (size_t i = 0; i < n; ++i) {
    yc[i] = y[i] - ym;
    for (size_t j = 0; j < p; ++j) xc[i][j] = x[i][j] - xm[j];
  }
  auto solve = [](std::vector<std::vector<double>> a, std::vector<double> b) {
    const size_t k = b.size();
    double trace = 0;
    for (size_t i = 0; i < k; ++i) trace += a[i][i];
    const double ridge = 1e-12 * (trace / double(k) + 1e-300);
    for (size_t i = 0; i < k; ++i) a[i][i] += ridge;
    for (size_t c = 0; c < k; ++c) {  // Gaussian elimination with partial pivoting
      size_t piv = c;
      for (size_t r = c + 1; r < k; ++r)
        if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
      std::swap(a[c], a[piv]);
      std::swap(b[c], b[piv]);
      if (a[c][c] == 0) continue;
      for (size_t r = c + 1; r < k; ++r) {
        const double f = a[r][c] / a[c][c];
        for (size_t q = c; q < k; ++q) a[r][q] -= f * a[c][q];
        b[r] -= f * b[c];
      }
    }
    std::vector<double> s(k, 0.0);
    for (size_t c = k; c-- > 0;) {
      double v = b[c];
      for (size_t q = c + 1; q < k; ++q) v -= a[c][q] * s[q];
      s[c] = a[c][c] == 0 ? 0.0 : v / a[c][c];
    }
    return s;
  };
  std::vector<double> w(p, 0.0);
  if (n >= p) {
    std::vector<std::vector<double>> g(p, std::vector<double>(p, 0.0));
    std::vector<double> r(p, 0.0);
    for (size_t i = 0; i < n; ++i)
      for (size_t a = 0; a < p; ++a) {
        r[a] += xc[i][a] * yc[i];
        for (size_t b = 0; b < p; ++b) g[a][b] += xc[i][a] * xc[i][b];
      }
    w = solve(g, r);
  } else {
    std::vector<std::vector<double>> g(n, std::vector<double>(n, 0.0));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        for (size_t a = 0; a < p; ++a) g[i][j] += xc[i][a] * xc[j][a];
    const std::vector<double> alpha = solve(g, yc);
    for (size_t i = 0; i < n; ++i)
      for (size_t a = 0; a < p; ++a) w[a] += xc[i][a] * alpha[i];
  }
  double b = ym;
  for (size_t j = 0; j < p; ++j) b -= xm[j] * w[j];
  std::vector<double> out{b};
  out.insert(out.end(), w.begin(), w.end());
  return out;
}

// ---- suffix array ---------------------------------------------------------------------------------

SuffixArray::SuffixArray(std::string text) : text_(std::move(text)) {
  const size_t n = text_.size();
  if (n >= std::numeric_limits<uint32_t>::max()) raise<ValueError>("suffix array: corpus of {} bytes is too large", n);
  sa_.resize(n);
  std::iota(sa_.begin(), sa_.end(), 0u);
  std::vector<int64_t> rank(n), tmp(n);
  for (size_t i = 0; i < n; ++i) rank[i] = static_cast<unsigned char>(text_[i]);
  // Prefix doubling: sort by (rank[i], rank[i + k]) until every rank is distinct.
  for (size_t k = 1; n > 1; k <<= 1) {
    auto key = [&](uint32_t i) { return std::make_pair(rank[i], i + k < n ? rank[i + k] : int64_t(-1)); };
    std::sort(sa_.begin(), sa_.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
    tmp[sa_[0]] = 0;
    for (size_t i = 1; i < n; ++i) tmp[sa_[i]] = tmp[sa_[i - 1]] + (key(sa_[i - 1]) < key(sa_[i]) ? 1 : 0);
    rank.swap(tmp);
    if (rank[sa_[n - 1]] == int64_t(n - 1)) break;
  }
}

std::pair<size_t, size_t> SuffixArray::equal_range(std::string_view q) const {
  auto prefix_cmp = [&](uint32_t pos) {  // compares the suffix's first |q| bytes with q
    return std::string_view(text_).substr(pos, q.size()).compare(q);
  };
  const auto lo = std::partition_point(sa_.begin(), sa_.end(), [&](uint32_t p) { return prefix_cmp(p) < 0; });
  const auto hi = std::partition_point(lo, sa_.end(), [&](uint32_t p) { return prefix_cmp(p) == 0; });
  return {size_t(lo - sa_.begin()), size_t(hi - sa_.begin())};
}

size_t SuffixArray::count(std::string_view q) const {
  if (q.empty()) return text_.size();
  const auto [lo, hi] = equal_range(q);
  return hi - lo;
}

std::pair<size_t, size_t> SuffixArray::longest_prefix_match(std::string_view q) const {
  size_t lo = 0, hi = sa_.size(), len = 0, where = 0;
  // Narrow the range of suffixes that share q's first `len` bytes, one byte at a time.
  while (len < q.size() && lo < hi) {
    const char c = q[len];
    auto at = [&](uint32_t p) { return p + len < text_.size() ? int(static_cast<unsigned char>(text_[p + len])) : -1; };
    const auto first = std::partition_point(sa_.begin() + std::ptrdiff_t(lo), sa_.begin() + std::ptrdiff_t(hi),
                                            [&](uint32_t p) { return at(p) < int(static_cast<unsigned char>(c)); });
    const auto last = std::partition_point(first, sa_.begin() + std::ptrdiff_t(hi),
                                           [&](uint32_t p) { return at(p) == int(static_cast<unsigned char>(c)); });
    if (first == last) break;
    lo = size_t(first - sa_.begin());
    hi = size_t(last - sa_.begin());
    where = sa_[lo];
    ++len;
  }
  return {len, where};
}

}  // namespace foundry::eval
