// emu_test.cc: runs every kernel of cuda/kernels on the CPU emulator
// (cuda_emu.h), in float and double, and checks it against plain
// sequential loops written from the formulas of device/kernels.go and
// ABI.md, rounding to T where the CPU device (device/cpu/internal/kern)
// rounds. It prints one line per check and exits 1 on any failure.
//
// Build and run: run.sh, or go test ./cuda -run KernelsEmulated (cuda/emu_test.go).
#include "cuda_emu.h"

#include "../cells.cu"
#include "../elementwise.cu"
#include "../nn.cu"
#include "../optim.cu"
#include "../reduce.cu"

#include <unistd.h>

#include <climits>
#include <cstdarg>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

// ---- reporting ----------------------------------------------------------

int g_checks = 0, g_failures = 0;

void report(const std::string& name, const std::string& err) {
    ++g_checks;
    if (err.empty()) {
        std::printf("ok   %s\n", name.c_str());
    } else {
        ++g_failures;
        std::printf("FAIL %s: %s\n", name.c_str(), err.c_str());
    }
    std::fflush(stdout);
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

// Tolerances: relative, plus an absolute floor for results near zero
// (values in these tests are of order 1).
template <class T>
struct Tol;
template <>
struct Tol<float> {
    static constexpr double rel = 1e-5, abs = 1e-6;
    static constexpr const char* name = "f32";
};
template <>
struct Tol<double> {
    static constexpr double rel = 1e-12, abs = 1e-14;
    static constexpr const char* name = "f64";
};

bool close(double got, double want, double rel, double abs) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    return std::fabs(got - want) <= abs + rel * std::fabs(want);
}

// compare returns "" when got[i] is close to want[i] for every i, else a
// description of the first mismatch and how many there are.
template <class G, class W>
std::string compare(const char* what, const std::vector<G>& got, const std::vector<W>& want,
                    double rel, double abs) {
    if (got.size() != want.size())
        return fmt("%s: %zu elements, want %zu", what, got.size(), want.size());
    long long bad = 0, first = -1;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (!close(double(got[i]), double(want[i]), rel, abs)) {
            if (first < 0) first = (long long)i;
            ++bad;
        }
    }
    if (bad == 0) return "";
    return fmt("%s[%lld] = %.17g, want %.17g (%lld of %zu differ)", what, first,
               double(got[first]), double(want[first]), bad, got.size());
}

template <class T, class W>
std::string compare(const char* what, const std::vector<T>& got, const std::vector<W>& want) {
    return compare(what, got, want, Tol<T>::rel, Tol<T>::abs);
}

// first returns the first non-empty message.
std::string first(std::initializer_list<std::string> errs) {
    for (auto& e : errs)
        if (!e.empty()) return e;
    return "";
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// ---- data ----------------------------------------------------------------

std::mt19937_64 rng(20260121);

template <class T>
std::vector<T> uniform(std::size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<T> v(n);
    for (auto& x : v) x = T(u(rng));
    return v;
}

std::vector<int> ints(std::size_t n, int lo, int hi) {  // in [lo, hi)
    std::uniform_int_distribution<int> u(lo, hi - 1);
    std::vector<int> v(n);
    for (auto& x : v) x = u(rng);
    return v;
}

template <class T>
constexpr T nan_v() {
    return std::numeric_limits<T>::quiet_NaN();
}

// Output buffers carry kPad canary elements past the shape; a kernel that
// writes past its shape changes them.
constexpr std::size_t kPad = 5;
constexpr double kCanary = 12345.5;

template <class T>
std::vector<T> padded(std::vector<T> v) {
    v.insert(v.end(), kPad, T(kCanary));
    return v;
}

template <class T>
std::string canaries(const char* what, const std::vector<T>& v) {
    for (std::size_t i = v.size() - kPad; i < v.size(); ++i)
        if (!(v[i] == T(kCanary))) return fmt("%s: element %zu past the shape was written", what, i);
    return "";
}

template <class T>
std::vector<T> head(const std::vector<T>& v, std::size_t n) {
    return std::vector<T>(v.begin(), v.begin() + n);
}

// ---- launch shapes -------------------------------------------------------

struct Shape {
    dim3 grid, block;
    std::string str() const {
        return fmt("grid=%ux%u block=%ux%u", grid.x, grid.y, block.x, block.y);
    }
};

// Shapes for a 1-D grid-stride kernel over n elements: the launcher's
// (blocks of 256, at most 4096 blocks) and two grids too small for n, so
// that the stride loop runs.
std::vector<Shape> strides(long long n) {
    unsigned b = unsigned(std::max(1LL, std::min((n + 255) / 256, 4096LL)));
    return {{dim3(b), dim3(256)}, {dim3(2), dim3(64)}, {dim3(1), dim3(32)}};
}

// Shapes for the warp-per-row kernels over n rows: the launcher's (8 rows
// per block of 256) and smaller grids where warps stride over rows.
std::vector<Shape> row_shapes(long long n) {
    unsigned b = unsigned(std::max(1LL, std::min((n + 7) / 8, 4096LL)));
    return {{dim3(b), dim3(256)}, {dim3(1), dim3(64)}, {dim3(2), dim3(32)}};
}

// pick chooses the float or double variant of a kernel.
template <class T, class F, class D>
auto pick(F f, D d) {
    if constexpr (std::is_same_v<T, float>)
        return f;
    else
        return d;
}
#define KERNEL(name) pick<T>(gc_##name##_f32, gc_##name##_f64)

std::string name(const char* kernel, const char* t, const std::string& rest) {
    return std::string(t) + " " + kernel + " " + rest;
}

double sigm(double x) { return 1 / (1 + std::exp(-x)); }

// ---- recurrent cells -----------------------------------------------------

template <class T>
void test_lstm_cell() {
    const char* tn = Tol<T>::name;
    struct Case {
        int batch, hidden;
    };
    for (Case cs : {Case{3, 37}, Case{5, 64}, Case{2, 300}}) {
        const int B = cs.batch, H = cs.hidden, n = B * H;
        for (const Shape& sh : strides(n)) {
            // variant 0: both biases, separate act; 1: no biases, no act;
            // 2: bih only, act = pre.
            for (int variant = 0; variant < 3; ++variant) {
                auto pre = uniform<T>(4 * n, -3, 3);
                auto bih = uniform<T>(4 * H, -1, 1), bhh = uniform<T>(4 * H, -1, 1);
                auto cprev = uniform<T>(n, -2, 2);
                const bool use_bih = variant != 1, use_bhh = variant == 0;
                // Reference (kern.LSTMCell): float64, rounded once; h from the rounded c.
                std::vector<T> wc(n), wh(n), wact(4 * n);
                for (int b = 0; b < B; ++b)
                    for (int j = 0; j < H; ++j) {
                        double u[4];
                        for (int g = 0; g < 4; ++g) {
                            double bias = (use_bih ? double(bih[g * H + j]) : 0) +
                                          (use_bhh ? double(bhh[g * H + j]) : 0);
                            u[g] = double(pre[b * 4 * H + g * H + j]) + bias;
                        }
                        double i = sigm(u[0]), f = sigm(u[1]), g = std::tanh(u[2]), o = sigm(u[3]);
                        T c = T(f * double(cprev[b * H + j]) + i * g);
                        wc[b * H + j] = c;
                        wh[b * H + j] = T(o * std::tanh(double(c)));
                        double a[4] = {i, f, g, o};
                        for (int k = 0; k < 4; ++k) wact[b * 4 * H + k * H + j] = T(a[k]);
                    }
                auto c = padded(std::vector<T>(n, nan_v<T>()));
                auto h = padded(std::vector<T>(n, nan_v<T>()));
                auto act = padded(std::vector<T>(4 * n, nan_v<T>()));
                auto pre_in = padded(pre);
                T* actp = variant == 0 ? act.data() : variant == 2 ? pre_in.data() : nullptr;
                emu::launch(KERNEL(lstm_cell), sh.grid, sh.block, pre_in.data(),
                            use_bih ? bih.data() : nullptr, use_bhh ? bhh.data() : nullptr,
                            cprev.data(), c.data(), h.data(), actp, B, H);
                std::string err = first({compare("c", head(c, n), wc), compare("h", head(h, n), wh),
                                         canaries("c", c), canaries("h", h)});
                if (variant == 0) err = first({err, compare("act", head(act, 4 * n), wact), canaries("act", act)});
                if (variant == 1) err = first({err, compare("pre (no act)", head(pre_in, 4 * n), pre, 0, 0)});
                if (variant == 2) err = first({err, compare("act=pre", head(pre_in, 4 * n), wact), canaries("pre", pre_in)});
                const char* what[] = {"bih+bhh act", "no bias, act NULL", "bih only, act=pre"};
                report(name("lstm_cell", tn, fmt("B=%d H=%d %s %s", B, H, sh.str().c_str(), what[variant])), err);
            }
        }
    }
}

template <class T>
void test_lstm_cell_grad() {
    const char* tn = Tol<T>::name;
    for (auto [B, H] : {std::pair{3, 37}, std::pair{4, 130}}) {
        const int n = B * H;
        for (const Shape& sh : strides(n)) {
            for (bool alias : {false, true}) {
                // act holds activated gates: i, f, o in (0, 1), g in (-1, 1).
                std::vector<T> act(4 * n);
                for (int b = 0; b < B; ++b)
                    for (int g = 0; g < 4; ++g) {
                        auto v = g == 2 ? uniform<T>(H, -0.95, 0.95) : uniform<T>(H, 0.05, 0.95);
                        for (int j = 0; j < H; ++j) act[b * 4 * H + g * H + j] = v[j];
                    }
                auto cprev = uniform<T>(n, -2, 2), c = uniform<T>(n, -2, 2);
                auto dh = uniform<T>(n, -1, 1), dc = uniform<T>(n, -1, 1);
                std::vector<T> wdpre(4 * n), wdcprev(n);
                for (int b = 0; b < B; ++b)
                    for (int j = 0; j < H; ++j) {
                        const int e = b * H + j, o = b * 4 * H + j;
                        double i = act[o], f = act[o + H], g = act[o + 2 * H], og = act[o + 3 * H];
                        double tc = std::tanh(double(c[e])), d = dh[e];
                        double dcT = double(dc[e]) + d * og * (1 - tc * tc);
                        wdpre[o] = T(dcT * g * (i * (1 - i)));
                        wdpre[o + H] = T(dcT * double(cprev[e]) * (f * (1 - f)));
                        wdpre[o + 2 * H] = T(dcT * i * (1 - g * g));
                        wdpre[o + 3 * H] = T(d * tc * (og * (1 - og)));
                        wdcprev[e] = T(dcT * f);
                    }
                auto act_in = padded(act), dc_in = padded(dc);
                auto dpre = padded(std::vector<T>(4 * n, nan_v<T>()));
                auto dcprev = padded(std::vector<T>(n, nan_v<T>()));
                T* dprep = alias ? act_in.data() : dpre.data();
                T* dcprevp = alias ? dc_in.data() : dcprev.data();
                emu::launch(KERNEL(lstm_cell_grad), sh.grid, sh.block, act_in.data(), cprev.data(),
                            c.data(), dh.data(), dc_in.data(), dprep, dcprevp, B, H);
                std::string err;
                if (alias)
                    err = first({compare("dpre=act", head(act_in, 4 * n), wdpre), compare("dcprev=dc", head(dc_in, n), wdcprev),
                                 canaries("act", act_in), canaries("dc", dc_in)});
                else
                    err = first({compare("dpre", head(dpre, 4 * n), wdpre), compare("dcprev", head(dcprev, n), wdcprev),
                                 canaries("dpre", dpre), canaries("dcprev", dcprev)});
                report(name("lstm_cell_grad", tn, fmt("B=%d H=%d %s%s", B, H, sh.str().c_str(), alias ? " dpre=act dcprev=dc" : "")), err);
            }
        }
    }
}

template <class T>
void test_gru_cell() {
    const char* tn = Tol<T>::name;
    for (auto [B, H] : {std::pair{3, 37}, std::pair{2, 200}}) {
        const int n = B * H;
        for (const Shape& sh : strides(n)) {
            // variant 0: both biases, act; 1: no bias, act NULL; 2: bhh only, act, h = hprev.
            for (int variant = 0; variant < 3; ++variant) {
                auto xpre = uniform<T>(3 * n, -2, 2), hpre = uniform<T>(3 * n, -2, 2);
                auto bih = uniform<T>(3 * H, -1, 1), bhh = uniform<T>(3 * H, -1, 1);
                auto hprev = uniform<T>(n, -1, 1);
                const bool use_bih = variant == 0, use_bhh = variant != 1;
                std::vector<T> wh(n), wact(4 * n);
                for (int b = 0; b < B; ++b)
                    for (int j = 0; j < H; ++j) {
                        const int o = b * 3 * H + j;
                        auto bi = [&](int g) { return use_bih ? double(bih[g * H + j]) : 0.0; };
                        auto bh = [&](int g) { return use_bhh ? double(bhh[g * H + j]) : 0.0; };
                        double r = sigm((double(xpre[o]) + double(hpre[o])) + (bi(0) + bh(0)));
                        double z = sigm((double(xpre[o + H]) + double(hpre[o + H])) + (bi(1) + bh(1)));
                        double hn = double(hpre[o + 2 * H]) + bh(2);
                        double nn = std::tanh((double(xpre[o + 2 * H]) + bi(2)) + r * hn);
                        wh[b * H + j] = T((1 - z) * nn + z * double(hprev[b * H + j]));
                        const int a = b * 4 * H + j;
                        wact[a] = T(r), wact[a + H] = T(z), wact[a + 2 * H] = T(nn), wact[a + 3 * H] = T(hn);
                    }
                auto h = padded(std::vector<T>(n, nan_v<T>()));
                auto hprev_in = padded(hprev);
                auto act = padded(std::vector<T>(4 * n, nan_v<T>()));
                T* hp = variant == 2 ? hprev_in.data() : h.data();
                emu::launch(KERNEL(gru_cell), sh.grid, sh.block, xpre.data(), hpre.data(),
                            use_bih ? bih.data() : nullptr, use_bhh ? bhh.data() : nullptr,
                            hprev_in.data(), hp, variant == 1 ? nullptr : act.data(), B, H);
                std::string err = variant == 2 ? first({compare("h=hprev", head(hprev_in, n), wh), canaries("hprev", hprev_in)})
                                               : first({compare("h", head(h, n), wh), canaries("h", h)});
                if (variant != 1) err = first({err, compare("act", head(act, 4 * n), wact), canaries("act", act)});
                else err = first({err, compare("act (NULL)", act, padded(std::vector<T>(4 * n, nan_v<T>())), 0, 0)});
                const char* what[] = {"bih+bhh act", "no bias, act NULL", "bhh only, h=hprev"};
                report(name("gru_cell", tn, fmt("B=%d H=%d %s %s", B, H, sh.str().c_str(), what[variant])), err);
            }
        }
    }
}

template <class T>
void test_gru_cell_grad() {
    const char* tn = Tol<T>::name;
    for (auto [B, H] : {std::pair{3, 37}, std::pair{5, 64}}) {
        const int n = B * H;
        for (const Shape& sh : strides(n)) {
            // variant 0: overwrite; 1: accumulate; 2: overwrite with dhprev = dh.
            for (int variant = 0; variant < 3; ++variant) {
                std::vector<T> act(4 * n);
                for (int b = 0; b < B; ++b)
                    for (int g = 0; g < 4; ++g) {
                        auto v = g == 2 ? uniform<T>(H, -0.95, 0.95) : g == 3 ? uniform<T>(H, -2, 2) : uniform<T>(H, 0.05, 0.95);
                        for (int j = 0; j < H; ++j) act[b * 4 * H + g * H + j] = v[j];
                    }
                auto hprev = uniform<T>(n, -1, 1), dh = uniform<T>(n, -1, 1);
                auto dhprev0 = uniform<T>(n, -1, 1);
                const bool acc = variant == 1;
                std::vector<T> wdx(3 * n), wdh(3 * n), wdhprev(n);
                for (int b = 0; b < B; ++b)
                    for (int j = 0; j < H; ++j) {
                        const int e = b * H + j, a = b * 4 * H + j, o = b * 3 * H + j;
                        double r = act[a], z = act[a + H], nn = act[a + 2 * H], hn = act[a + 3 * H], d = dh[e];
                        double dz = d * (double(hprev[e]) - nn) * (z * (1 - z));
                        double dn = d * (1 - z) * (1 - nn * nn);
                        double dr = dn * hn * (r * (1 - r));
                        wdx[o] = T(dr), wdx[o + H] = T(dz), wdx[o + 2 * H] = T(dn);
                        wdh[o] = T(dr), wdh[o + H] = T(dz), wdh[o + 2 * H] = T(dn * r);
                        wdhprev[e] = acc ? T(double(dhprev0[e]) + d * z) : T(d * z);
                    }
                auto dx = padded(std::vector<T>(3 * n, nan_v<T>()));
                auto dhp = padded(std::vector<T>(3 * n, nan_v<T>()));
                auto dhprev = padded(acc ? dhprev0 : std::vector<T>(n, nan_v<T>()));
                auto dh_in = padded(dh);
                T* out = variant == 2 ? dh_in.data() : dhprev.data();
                emu::launch(KERNEL(gru_cell_grad), sh.grid, sh.block, act.data(), hprev.data(),
                            dh_in.data(), dx.data(), dhp.data(), out, acc ? 1 : 0, B, H);
                std::string err = first({compare("dxpre", head(dx, 3 * n), wdx), compare("dhpre", head(dhp, 3 * n), wdh),
                                         canaries("dxpre", dx), canaries("dhpre", dhp)});
                err = first({err, variant == 2 ? compare("dhprev=dh", head(dh_in, n), wdhprev)
                                               : compare("dhprev", head(dhprev, n), wdhprev),
                             canaries("dhprev", variant == 2 ? dh_in : dhprev)});
                const char* what[] = {"overwrite", "accumulate", "dhprev=dh"};
                report(name("gru_cell_grad", tn, fmt("B=%d H=%d %s %s", B, H, sh.str().c_str(), what[variant])), err);
            }
        }
    }
}

// ---- embedding -----------------------------------------------------------

template <class T>
void test_embedding() {
    const char* tn = Tol<T>::name;
    const int n = 50, dim = 37, vocab = 11;
    for (bool bad : {false, true}) {
        auto ids = ints(n, 0, vocab);
        if (bad) ids[3] = -1, ids[17] = vocab, ids[49] = INT_MIN;
        auto table = uniform<T>(vocab * dim, -1, 1);
        std::vector<T> want(n * dim, T(0));
        for (int i = 0; i < n; ++i)
            if (ids[i] >= 0 && ids[i] < vocab)
                for (int d = 0; d < dim; ++d) want[i * dim + d] = table[ids[i] * dim + d];
        for (const Shape& sh : strides(n * dim)) {
            auto out = padded(std::vector<T>(n * dim, nan_v<T>()));
            unsigned status = 0x100;  // another bit, which must stay
            emu::launch(KERNEL(embedding), sh.grid, sh.block, table.data(), ids.data(), out.data(), n, dim, vocab, &status);
            unsigned wst = 0x100 | (bad ? 1u : 0u);
            std::string err = first({compare("out", head(out, n * dim), want, 0, 0), canaries("out", out),
                                     status == wst ? "" : fmt("status = %#x, want %#x", status, wst)});
            report(name("embedding", tn, fmt("n=%d dim=%d vocab=%d %s%s", n, dim, vocab, sh.str().c_str(), bad ? " bad ids" : "")), err);
        }
    }
}

void test_check_ids() {
    for (bool bad : {false, true}) {
        const int n = 1000, limit = 40;
        auto ids = ints(n, 0, limit);
        if (bad) ids[999] = limit;
        for (const Shape& sh : strides(n)) {
            unsigned status = 0;
            emu::launch(gc_check_ids, sh.grid, sh.block, ids.data(), n, limit, &status, 2);
            unsigned want = bad ? 2u : 0u;
            report(fmt("check_ids n=%d %s%s", n, sh.str().c_str(), bad ? " bad id" : ""),
                   status == want ? "" : fmt("status = %#x, want %#x", status, want));
        }
    }
    unsigned status = 0;
    std::vector<int> ids = {0, -5, 3};
    emu::launch(gc_check_ids, dim3(1), dim3(32), ids.data(), 3, 4, &status, 4);
    report("check_ids negative id sets the given bit", status == 4 ? "" : fmt("status = %#x, want 0x4", status));
}

// The scan and the sequential kernel add the same rows; the reference is
// the formula of ABI.md for each: the scan sums a row's gradients in order
// of i in T, then adds the sum; the sequential kernel adds each into the
// table in order of i (as the CPU device does).
template <class T>
std::vector<T> ref_embedding_grad(bool scan, const std::vector<int>& ids, const std::vector<T>& dout,
                                  std::vector<T> table, int dim, int vocab) {
    const int n = int(ids.size());
    if (scan) {
        for (int v = 0; v < vocab; ++v)
            for (int d = 0; d < dim; ++d) {
                T acc = T(0);
                for (int i = 0; i < n; ++i)
                    if (ids[i] == v) acc += dout[(long long)i * dim + d];
                table[v * dim + d] += acc;
            }
    } else {
        for (int i = 0; i < n; ++i)
            if (ids[i] >= 0 && ids[i] < vocab)
                for (int d = 0; d < dim; ++d) table[ids[i] * dim + d] += dout[(long long)i * dim + d];
    }
    return table;
}

template <class T>
void test_embedding_grad() {
    const char* tn = Tol<T>::name;
    struct Case {
        int n, dim, vocab;
    };
    for (Case cs : {Case{1000, 37, 7}, Case{2500, 200, 5}, Case{300, 300, 13}, Case{1, 1, 1}}) {
        auto ids = ints(cs.n, 0, cs.vocab);
        if (cs.n > 10) ids[0] = -1, ids[cs.n / 2] = cs.vocab, ids[cs.n - 1] = -7;  // skipped
        auto dout = uniform<T>((long long)cs.n * cs.dim, -1, 1);
        auto table = uniform<T>(cs.vocab * cs.dim, -1, 1);
        const std::string shape = fmt("n=%d dim=%d vocab=%d", cs.n, cs.dim, cs.vocab);
        {
            auto want = ref_embedding_grad(true, ids, dout, table, cs.dim, cs.vocab);
            Shape sh{dim3((cs.dim + 127) / 128, cs.vocab), dim3(128)};
            auto got = padded(table);
            emu::launch(KERNEL(embedding_grad_scan), sh.grid, sh.block, ids.data(), dout.data(), got.data(), cs.n, cs.dim, cs.vocab);
            auto again = padded(table);
            emu::launch(KERNEL(embedding_grad_scan), sh.grid, sh.block, ids.data(), dout.data(), again.data(), cs.n, cs.dim, cs.vocab);
            report(name("embedding_grad_scan", tn, shape + " " + sh.str()),
                   first({compare("dtable", head(got, want.size()), want), canaries("dtable", got),
                          same_bits(got, again) ? "" : "two runs differ"}));
        }
        auto want = ref_embedding_grad(false, ids, dout, table, cs.dim, cs.vocab);
        for (const Shape& sh : strides(cs.dim)) {
            auto got = padded(table);
            emu::launch(KERNEL(embedding_grad_seq), sh.grid, sh.block, ids.data(), dout.data(), got.data(), cs.n, cs.dim, cs.vocab);
            report(name("embedding_grad_seq", tn, shape + " " + sh.str()),
                   first({compare("dtable", head(got, want.size()), want, 0, 0), canaries("dtable", got)}));
        }
    }
}

// ---- softmax, cross-entropy, dropout ------------------------------------

// ref_xent is kern.SoftmaxCrossEntropy row by row: row losses (0 for a bad
// target) and dlogits in float64, rounded once.
template <class T>
void ref_xent(const std::vector<T>& x, const std::vector<int>& t, int classes, double scale,
              std::vector<double>& loss, std::vector<T>& d) {
    const int n = int(t.size());
    loss.assign(n, 0);
    d.assign((std::size_t)n * classes, T(0));
    for (int r = 0; r < n; ++r) {
        if (t[r] < 0 || t[r] >= classes) continue;
        const T* xr = &x[(std::size_t)r * classes];
        double m = xr[0];
        for (int j = 1; j < classes; ++j)
            if (xr[j] > m) m = xr[j];
        double s = 0;
        std::vector<double> e(classes);
        for (int j = 0; j < classes; ++j) s += e[j] = std::exp(double(xr[j]) - m);
        loss[r] = std::log(s) - (double(xr[t[r]]) - m);
        for (int j = 0; j < classes; ++j) d[(std::size_t)r * classes + j] = T(scale * (e[j] / s - (j == t[r] ? 1 : 0)));
    }
}

template <class T>
void test_softmax_xent() {
    const char* tn = Tol<T>::name;
    struct Case {
        int n, classes;
        bool bad;
    };
    for (Case cs : {Case{13, 37, true}, Case{5, 1000, false}, Case{9, 1, true}, Case{40, 64, false}}) {
        const int n = cs.n, C = cs.classes;
        auto logits = uniform<T>((std::size_t)n * C, -4, 4);
        auto targets = ints(n, 0, C);
        if (cs.bad) targets[1] = -1, targets[n - 1] = C;
        const double scale = 1.0 / n;
        std::vector<double> wloss;
        std::vector<T> wd;
        ref_xent(logits, targets, C, scale, wloss, wd);
        for (const Shape& sh : row_shapes(n)) {
            // variant 0: separate dlogits; 1: no dlogits; 2: dlogits = logits.
            for (int variant = 0; variant < 3; ++variant) {
                auto x = padded(logits);
                auto d = padded(std::vector<T>((std::size_t)n * C, nan_v<T>()));
                auto loss = padded(std::vector<double>(n, nan_v<double>()));
                unsigned status = 0;
                T* dp = variant == 0 ? d.data() : variant == 2 ? x.data() : nullptr;
                emu::launch(KERNEL(softmax_xent), sh.grid, sh.block, x.data(), targets.data(), n, C, scale, dp,
                            loss.data(), &status);
                const unsigned wst = cs.bad ? 4u : 0u;
                std::string err = first({compare("rowloss", head(loss, n), wloss, Tol<T>::rel, Tol<T>::abs),
                                         canaries("rowloss", loss),
                                         status == wst ? "" : fmt("status = %#x, want %#x", status, wst)});
                if (variant == 0) err = first({err, compare("dlogits", head(d, wd.size()), wd), canaries("dlogits", d)});
                if (variant == 1) err = first({err, compare("logits (no dlogits)", head(x, wd.size()), logits, 0, 0)});
                if (variant == 2) err = first({err, compare("dlogits=logits", head(x, wd.size()), wd), canaries("logits", x)});
                const char* what[] = {"dlogits", "dlogits NULL", "dlogits=logits"};
                report(name("softmax_xent", tn, fmt("n=%d C=%d %s %s%s", n, C, sh.str().c_str(), what[variant], cs.bad ? " bad targets" : "")), err);

                // The loss: gc_sum_finish over the row losses (the launcher's second kernel).
                if (variant == 0) {
                    long double s = 0;
                    for (double v : wloss) s += v;
                    for (int acc = 0; acc < 2; ++acc) {
                        std::vector<T> out = {T(0.75)};
                        emu::launch(KERNEL(sum_finish), dim3(1), dim3(256), loss.data(), n, out.data(), scale, acc);
                        const double want = double(T((acc ? 0.75 : 0.0) + double(scale * s)));
                        report(name("sum_finish", tn, fmt("row losses n=%d C=%d%s", n, C, acc ? " accumulate" : "")),
                               compare("loss", out, std::vector<double>{want}));
                    }
                }
            }
        }
    }
    // A NaN logit makes its row's loss and gradient NaN, and only its row's.
    {
        const int n = 3, C = 40;
        auto logits = uniform<T>(n * C, -2, 2);
        logits[1 * C + 5] = nan_v<T>();
        std::vector<int> targets = {3, 7, 39};
        std::vector<double> wloss;
        std::vector<T> wd;
        ref_xent(logits, targets, C, 0.5, wloss, wd);
        std::vector<double> loss(n);
        std::vector<T> d(n * C);
        unsigned status = 0;
        emu::launch(KERNEL(softmax_xent), dim3(1), dim3(64), logits.data(), targets.data(), n, C, 0.5, d.data(), loss.data(), &status);
        bool nan_row = std::isnan(loss[1]);
        for (int j = 0; j < C; ++j) nan_row = nan_row && std::isnan(double(d[C + j]));
        report(name("softmax_xent", tn, "NaN logit"),
               first({nan_row ? "" : "row 1 is not all NaN", compare("rowloss", loss, wloss, Tol<T>::rel, Tol<T>::abs),
                      compare("dlogits", d, wd), status == 0 ? "" : "status set"}));
    }
}

template <class T>
void test_softmax() {
    const char* tn = Tol<T>::name;
    struct Case {
        int n, classes;
        double inv_temp;
    };
    for (Case cs : {Case{7, 37, 1.0}, Case{3, 1000, 0.5}, Case{4, 1, 1.0}, Case{20, 50, 2.5}}) {
        const int n = cs.n, C = cs.classes;
        auto logits = uniform<T>((std::size_t)n * C, -4, 4);
        // kern.Softmax: max subtracted, then scaled; exponentials and sum in float64.
        std::vector<T> want(logits.size());
        for (int r = 0; r < n; ++r) {
            const T* x = &logits[(std::size_t)r * C];
            double m = x[0];
            for (int j = 1; j < C; ++j)
                if (x[j] > m) m = x[j];
            std::vector<double> e(C);
            double s = 0;
            for (int j = 0; j < C; ++j) s += e[j] = std::exp((double(x[j]) - m) * cs.inv_temp);
            for (int j = 0; j < C; ++j) want[(std::size_t)r * C + j] = T(e[j] / s);
        }
        for (const Shape& sh : row_shapes(n)) {
            for (bool alias : {false, true}) {
                auto x = padded(logits);
                auto p = padded(std::vector<T>(logits.size(), nan_v<T>()));
                emu::launch(KERNEL(softmax), sh.grid, sh.block, x.data(), alias ? x.data() : p.data(), n, C, cs.inv_temp);
                auto& got = alias ? x : p;
                report(name("softmax", tn, fmt("n=%d C=%d inv_temp=%g %s%s", n, C, cs.inv_temp, sh.str().c_str(), alias ? " probs=logits" : "")),
                       first({compare("probs", head(got, want.size()), want), canaries("probs", got)}));
            }
        }
    }
}

// keep is device.DropoutKeep, written again from its formula.
bool keep(unsigned long long seed, unsigned long long index, double p) {
    unsigned long long z = seed ^ (index * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return double(z >> 40) * (1.0 / 16777216.0) >= p;
}

// Results of the Go function device.DropoutKeep(seed, index, p), printed by
// a throwaway program (go run, in a module with a replace directive to this
// repository) that called it on these arguments:
//   fmt.Printf("{0x%XULL, 0x%XULL, %v, %v},\n", seed, index, p, device.DropoutKeep(seed, index, p))
struct GoKeep {
    unsigned long long seed, index;
    double p;
    bool keep;
};
const GoKeep kGoKeep[] = {
    {0x0ULL, 0x0ULL, 0.5, false},
    {0x1ULL, 0x0ULL, 0.5, false},
    {0x1ULL, 0x1ULL, 0.5, true},
    {0x2AULL, 0x7ULL, 0.1, true},
    {0x2AULL, 0x8ULL, 0.9, false},
    {0x3039ULL, 0x3E8ULL, 0.3, false},
    {0x3039ULL, 0x3E9ULL, 0.3, true},
    {0x3039ULL, 0x3EAULL, 0.3, true},
    {0x3039ULL, 0x3EBULL, 0.3, true},
    {0xDEADBEEFULL, 0x10000000000ULL, 0.5, false},
    {0xFFFFFFFFFFFFFFFFULL, 0x3ULL, 0.25, true},
    {0x7ULL, 0x75BCD15ULL, 0.75, true},
    {0x63ULL, 0x5ULL, 0, true},
    {0x7E8ULL, 0x11ULL, 0.5, false},
    {0x7E8ULL, 0x12ULL, 0.5, true},
    {0x7E8ULL, 0x13ULL, 0.5, true},
};

template <class T>
void test_dropout() {
    const char* tn = Tol<T>::name;
    // The kernel's mask at (seed, offset) against Go's DropoutKeep.
    {
        std::string err;
        for (const GoKeep& k : kGoKeep) {
            std::vector<T> x = {T(2)}, y = {T(0)}, mask = {T(-1)};
            emu::launch(KERNEL(dropout), dim3(1), dim3(32), x.data(), y.data(), mask.data(), 1, k.p, k.seed, k.index);
            if ((mask[0] != T(0)) != k.keep && err.empty())
                err = fmt("seed %#llx index %#llx p %g: kept %d, Go keeps %d", k.seed, k.index, k.p, mask[0] != T(0), k.keep);
        }
        report(name("dropout", tn, "masks equal device.DropoutKeep (hard-coded Go results)"), err);
    }
    const int n = 1000;
    for (double p : {0.0, 0.3, 0.9}) {
        const unsigned long long seed = 0x1234567890ABCDEFull, offset = (1ull << 40) + 5;
        auto x = uniform<T>(n, -2, 2);
        x[10] = nan_v<T>();
        const T k = T(1.0 / (1.0 - p));
        std::vector<T> wmask(n), wy(n);
        int kept = 0;
        for (int i = 0; i < n; ++i) {
            wmask[i] = keep(seed, offset + i, p) ? k : T(0);
            wy[i] = x[i] * wmask[i];
            kept += wmask[i] != T(0);
        }
        for (const Shape& sh : strides(n)) {
            for (bool alias : {false, true}) {
                auto xin = padded(x);
                auto y = padded(std::vector<T>(n, nan_v<T>()));
                auto mask = padded(std::vector<T>(n, nan_v<T>()));
                emu::launch(KERNEL(dropout), sh.grid, sh.block, xin.data(), alias ? xin.data() : y.data(), mask.data(), n, p, seed, offset);
                auto& got = alias ? xin : y;
                report(name("dropout", tn, fmt("n=%d p=%g (kept %d) %s%s", n, p, kept, sh.str().c_str(), alias ? " y=x" : "")),
                       first({compare("mask", head(mask, n), wmask, 0, 0), compare("y", head(got, n), wy, 0, 0),
                              canaries("mask", mask), canaries("y", got)}));
            }
        }
    }
}

// ---- reductions ----------------------------------------------------------

template <class T>
void test_sum_squares() {
    const char* tn = Tol<T>::name;
    for (long long n : {0LL, 1LL, 1000LL, 5000LL, 100000LL}) {
        auto x = uniform<T>(n, -1, 1);
        long double s = 0;
        for (T v : x) s += (long double)v * v;
        const long long launcher = std::max(1LL, std::min((n + 2047) / 2048, 1024LL));
        for (long long parts : {launcher, 3LL, 7LL}) {
            for (int acc = 0; acc < 2; ++acc) {
                std::vector<double> partials(parts, nan_v<double>());
                std::vector<T> out = {T(2.5)};
                emu::launch(KERNEL(sum_squares_partial), dim3(unsigned(parts)), dim3(256), x.data(), n, partials.data());
                emu::launch(KERNEL(sum_finish), dim3(1), dim3(256), partials.data(), parts, out.data(), 1.0, acc);
                // Determinism: the same shape gives the same bits.
                std::vector<double> partials2(parts);
                std::vector<T> out2 = {T(2.5)};
                emu::launch(KERNEL(sum_squares_partial), dim3(unsigned(parts)), dim3(256), x.data(), n, partials2.data());
                emu::launch(KERNEL(sum_finish), dim3(1), dim3(256), partials2.data(), parts, out2.data(), 1.0, acc);
                const double want = double(T((acc ? 2.5L : 0.0L) + s));
                report(name("sum_squares", tn, fmt("n=%lld parts=%lld%s", n, parts, acc ? " accumulate" : "")),
                       first({compare("out", out, std::vector<double>{want}),
                              same_bits(partials, partials2) && same_bits(out, out2) ? "" : "two runs differ"}));
            }
        }
    }
    for (int special = 0; special < 2; ++special) {
        const long long n = 3000;
        auto x = uniform<T>(n, -1, 1);
        x[1234] = special ? std::numeric_limits<T>::infinity() : nan_v<T>();
        std::vector<double> partials(2);
        std::vector<T> out = {T(0)};
        emu::launch(KERNEL(sum_squares_partial), dim3(2), dim3(256), x.data(), n, partials.data());
        emu::launch(KERNEL(sum_finish), dim3(1), dim3(256), partials.data(), 2, out.data(), 1.0, 0);
        bool ok = special ? std::isinf(double(out[0])) && out[0] > 0 : std::isnan(double(out[0]));
        report(name("sum_squares", tn, special ? "an infinity gives +Inf" : "a NaN gives NaN"),
               ok ? "" : fmt("out = %g", double(out[0])));
    }
    // gc_sum_finish alone, with a scale and n not a multiple of 256.
    for (long long n : {1LL, 300LL, 5000LL}) {
        auto x = uniform<double>(n, -3, 3);
        long double s = 0;
        for (double v : x) s += v;
        std::vector<T> out = {T(-1)};
        emu::launch(KERNEL(sum_finish), dim3(1), dim3(256), x.data(), n, out.data(), 0.125, 1);
        report(name("sum_finish", tn, fmt("n=%lld scale=0.125 accumulate", n)),
               compare("out", out, std::vector<double>{double(T(-1.0L + 0.125L * s))}));
    }
}

template <class T>
void test_sum_rows() {
    const char* tn = Tol<T>::name;
    for (auto [rows, cols] : {std::pair{100, 37}, std::pair{3, 1000}, std::pair{1, 1}, std::pair{17, 64}}) {
        auto x = uniform<T>((std::size_t)rows * cols, -1, 1);
        for (int acc = 0; acc < 2; ++acc) {
            auto out0 = acc ? uniform<T>(cols, -1, 1) : std::vector<T>(cols, nan_v<T>());
            std::vector<double> want(cols);
            for (int c = 0; c < cols; ++c) {
                long double s = acc ? (long double)out0[c] : 0;
                for (int r = 0; r < rows; ++r) s += x[(std::size_t)r * cols + c];
                want[c] = double(T(s));
            }
            Shape sh{dim3((cols + 31) / 32), dim3(32, 8)};
            auto out = padded(out0), out2 = padded(out0);
            emu::launch(KERNEL(sum_rows), sh.grid, sh.block, x.data(), out.data(), rows, cols, acc);
            emu::launch(KERNEL(sum_rows), sh.grid, sh.block, x.data(), out2.data(), rows, cols, acc);
            report(name("sum_rows", tn, fmt("rows=%d cols=%d %s%s", rows, cols, sh.str().c_str(), acc ? " accumulate" : "")),
                   first({compare("out", head(out, cols), want), canaries("out", out),
                          same_bits(out, out2) ? "" : "two runs differ"}));
        }
    }
}

// ---- element-wise --------------------------------------------------------

template <class T>
void test_elementwise() {
    const char* tn = Tol<T>::name;
    for (auto [rows, cols] : {std::pair{7, 37}, std::pair{3, 1000}}) {
        auto bias = uniform<T>(cols, -1, 1), y0 = uniform<T>((std::size_t)rows * cols, -1, 1);
        std::vector<T> want(y0);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) want[(std::size_t)r * cols + c] += bias[c];
        for (const Shape& sh : strides((long long)rows * cols)) {
            auto y = padded(y0);
            emu::launch(KERNEL(add_bias), sh.grid, sh.block, bias.data(), y.data(), rows, cols);
            report(name("add_bias", tn, fmt("rows=%d cols=%d %s", rows, cols, sh.str().c_str())),
                   first({compare("y", head(y, want.size()), want, 0, 0), canaries("y", y)}));
        }
    }
    const int n = 1000;
    for (const Shape& sh : strides(n)) {
        auto x = padded(std::vector<T>(n, nan_v<T>()));
        emu::launch(KERNEL(fill), sh.grid, sh.block, x.data(), n, -2.7);
        report(name("fill", tn, sh.str()), first({compare("x", head(x, n), std::vector<T>(n, T(-2.7)), 0, 0), canaries("x", x)}));
    }
    // Axpby: alpha and beta rounded to T; beta == 0 does not read y.
    struct Ax {
        double alpha, beta;
        bool alias, nan_y;
    };
    for (Ax a : {Ax{0.7, 0, false, true}, Ax{1, 1, false, false}, Ax{-0.3, 1.3, false, false}, Ax{0.5, 0.25, true, false},
                 Ax{2, 0, true, false}}) {
        auto x = uniform<T>(n, -1, 1);
        auto y0 = a.nan_y ? std::vector<T>(n, nan_v<T>()) : uniform<T>(n, -1, 1);
        const T at = T(a.alpha), bt = T(a.beta);
        std::vector<T> want(n);
        for (int i = 0; i < n; ++i) {
            T yi = a.alias ? x[i] : y0[i];
            want[i] = bt == T(0) ? at * x[i] : at * x[i] + bt * yi;
        }
        for (const Shape& sh : strides(n)) {
            auto xin = padded(x), y = padded(y0);
            T* yp = a.alias ? xin.data() : y.data();
            emu::launch(KERNEL(axpby), sh.grid, sh.block, xin.data(), yp, n, a.alpha, a.beta);
            auto& got = a.alias ? xin : y;
            report(name("axpby", tn, fmt("alpha=%g beta=%g%s%s %s", a.alpha, a.beta, a.alias ? " y=x" : "",
                                         a.nan_y ? " y=NaN" : "", sh.str().c_str())),
                   first({compare("y", head(got, n), want), canaries("y", got)}));
        }
    }
    // Mul: z separate, z = x, z = y.
    for (int variant = 0; variant < 3; ++variant) {
        auto x = uniform<T>(n, -2, 2), y = uniform<T>(n, -2, 2);
        std::vector<T> want(n);
        for (int i = 0; i < n; ++i) want[i] = x[i] * y[i];
        for (const Shape& sh : strides(n)) {
            auto xin = padded(x), yin = padded(y), z = padded(std::vector<T>(n, nan_v<T>()));
            T* zp = variant == 0 ? z.data() : variant == 1 ? xin.data() : yin.data();
            emu::launch(KERNEL(mul), sh.grid, sh.block, xin.data(), yin.data(), zp, n);
            auto& got = variant == 0 ? z : variant == 1 ? xin : yin;
            const char* what[] = {"", " z=x", " z=y"};
            report(name("mul", tn, fmt("%s%s", sh.str().c_str(), what[variant])),
                   first({compare("z", head(got, n), want, 0, 0), canaries("z", got)}));
        }
    }
    // Clamp: bounds rounded to T, NaN stays NaN, infinities clamp.
    {
        auto x = uniform<T>(n, -2, 2);
        x[0] = nan_v<T>(), x[1] = std::numeric_limits<T>::infinity(), x[2] = -std::numeric_limits<T>::infinity();
        const double lo = -0.3, hi = 0.7;
        const T l = T(lo), h = T(hi);
        std::vector<T> want(n);
        for (int i = 0; i < n; ++i) want[i] = x[i] < l ? l : x[i] > h ? h : x[i];
        for (const Shape& sh : strides(n)) {
            auto got = padded(x);
            emu::launch(KERNEL(clamp), sh.grid, sh.block, got.data(), n, lo, hi);
            report(name("clamp", tn, fmt("[%g, %g] with NaN and infinities %s", lo, hi, sh.str().c_str())),
                   first({compare("x", head(got, n), want, 0, 0), std::isnan(double(got[0])) ? "" : "NaN was clamped",
                          canaries("x", got)}));
        }
    }
}

void test_fill_i32() {
    const int n = 1000;
    for (double v : {-2.7, 3.9, 1e3, -0.5}) {
        for (const Shape& sh : strides(n)) {
            auto x = padded(std::vector<int>(n, -99));
            emu::launch(gc_fill_i32, sh.grid, sh.block, x.data(), n, v);
            const int want = int(v);  // truncation toward zero, as Go's int32(v)
            std::string err;
            for (int i = 0; i < n && err.empty(); ++i)
                if (x[i] != want) err = fmt("x[%d] = %d, want %d", i, x[i], want);
            for (std::size_t i = n; i < x.size() && err.empty(); ++i)
                if (x[i] != int(kCanary)) err = "wrote past n";
            report(fmt("i32 fill value=%g %s", v, sh.str().c_str()), err);
        }
    }
}

// ---- optimizers: kern.SGD, kern.Adam, kern.RMSprop in T --------------------

template <class T>
void test_sgd() {
    const char* tn = Tol<T>::name;
    struct Cfg {
        double lr, momentum, dampening, wd;
        bool nesterov;
    };
    const int n = 1000;
    for (Cfg c : {Cfg{0.1, 0, 0, 0, false}, Cfg{0.05, 0, 0, 0.01, false}, Cfg{0.1, 0.9, 0.1, 0.01, false},
                  Cfg{0.1, 0.9, 0, 0, true}}) {
        for (const Shape& sh : {strides(n)[0], strides(n)[1]}) {
            auto param = uniform<T>(n, -1, 1), wp = param;
            std::vector<T> vel(n, nan_v<T>()), wv(n, nan_v<T>());  // not read at step 1
            std::string err;
            for (int step = 1; step <= 3; ++step) {
                auto grad = uniform<T>(n, -1, 1);
                const T lr = T(c.lr), wd = T(c.wd), mom = T(c.momentum), damp = T(1 - c.dampening);
                for (int i = 0; i < n; ++i) {
                    T p = wp[i], g = grad[i];
                    if (c.wd != 0) g += wd * p;
                    if (c.momentum != 0) {
                        T v = step == 1 ? g : mom * wv[i] + damp * g;
                        wv[i] = v;
                        g = c.nesterov ? g + mom * v : v;
                    }
                    wp[i] = p - lr * g;
                }
                emu::launch(KERNEL(sgd), sh.grid, sh.block, param.data(), grad.data(),
                            c.momentum != 0 ? vel.data() : nullptr, n, c.lr, c.momentum, c.dampening, c.wd,
                            c.nesterov ? 1 : 0, step == 1 ? 1 : 0);
                err = first({err, compare(fmt("param step %d", step).c_str(), param, wp)});
                if (c.momentum != 0) err = first({err, compare(fmt("velocity step %d", step).c_str(), vel, wv)});
            }
            report(name("sgd", tn, fmt("lr=%g momentum=%g dampening=%g wd=%g%s%s %s", c.lr, c.momentum, c.dampening, c.wd,
                                       c.nesterov ? " nesterov" : "", c.momentum == 0 ? " velocity NULL" : "", sh.str().c_str())),
                   err);
        }
    }
}

template <class T>
void test_adam() {
    const char* tn = Tol<T>::name;
    struct Cfg {
        double lr, beta1, beta2, eps, wd;
        bool decoupled;
    };
    const int n = 1000;
    for (Cfg c : {Cfg{1e-3, 0.9, 0.999, 1e-8, 0, false}, Cfg{1e-2, 0.9, 0.999, 1e-8, 0.01, false},
                  Cfg{1e-2, 0.8, 0.99, 1e-6, 0.1, true}}) {
        for (const Shape& sh : {strides(n)[0], strides(n)[1]}) {
            auto param = uniform<T>(n, -1, 1), wp = param;
            std::vector<T> m(n, T(0)), v(n, T(0)), wm = m, wv = v;
            std::string err;
            for (int step = 1; step <= 3; ++step) {
                auto grad = uniform<T>(n, -1, 1);
                // What the launcher passes (ABI.md), computed in double.
                const double t = step;
                const double step_size = c.lr / (1 - std::pow(c.beta1, t));
                const double bc2_sqrt = std::sqrt(1 - std::pow(c.beta2, t));
                const double decay = 1 - c.lr * c.wd;
                const bool coupled = c.wd != 0 && !c.decoupled, shrink = c.wd != 0 && c.decoupled;
                const T ss = T(step_size), bc2 = T(bc2_sqrt), b1 = T(c.beta1), b1c = T(1 - c.beta1), b2 = T(c.beta2),
                        b2c = T(1 - c.beta2), eps = T(c.eps), wd = T(c.wd), dec = T(decay);
                for (int i = 0; i < n; ++i) {
                    T p = wp[i], g = grad[i];
                    if (coupled) g += wd * p;
                    if (shrink) p *= dec;
                    T mi = b1 * wm[i] + b1c * g;
                    T vi = b2 * wv[i] + b2c * g * g;
                    wm[i] = mi, wv[i] = vi;
                    T denom = T(std::sqrt(double(vi))) / bc2 + eps;
                    wp[i] = p - ss * mi / denom;
                }
                emu::launch(KERNEL(adam), sh.grid, sh.block, param.data(), grad.data(), m.data(), v.data(), n, step_size,
                            bc2_sqrt, c.beta1, c.beta2, c.eps, c.wd, decay, coupled ? 1 : 0, shrink ? 1 : 0);
                err = first({err, compare(fmt("param step %d", step).c_str(), param, wp),
                             compare(fmt("m step %d", step).c_str(), m, wm), compare(fmt("v step %d", step).c_str(), v, wv)});
            }
            report(name("adam", tn, fmt("lr=%g betas=(%g, %g) eps=%g wd=%g%s %s", c.lr, c.beta1, c.beta2, c.eps, c.wd,
                                        c.decoupled ? " decoupled" : "", sh.str().c_str())),
                   err);
        }
    }
}

template <class T>
void test_rmsprop() {
    const char* tn = Tol<T>::name;
    struct Cfg {
        double lr, alpha, eps, wd, momentum;
        bool centered;
    };
    const int n = 1000;
    for (Cfg c : {Cfg{1e-2, 0.99, 1e-8, 0, 0, false}, Cfg{1e-2, 0.9, 1e-6, 0, 0, true}, Cfg{1e-2, 0.99, 1e-8, 0, 0.9, false},
                  Cfg{5e-3, 0.95, 1e-8, 0.01, 0.5, true}}) {
        for (const Shape& sh : {strides(n)[0], strides(n)[1]}) {
            auto param = uniform<T>(n, -1, 1), wp = param;
            std::vector<T> sq(n, T(0)), ga(n, T(0)), vel(n, T(0));
            auto wsq = sq, wga = ga, wvel = vel;
            std::string err;
            for (int step = 1; step <= 3; ++step) {
                auto grad = uniform<T>(n, -1, 1);
                const T lr = T(c.lr), a = T(c.alpha), ac = T(1 - c.alpha), eps = T(c.eps), wd = T(c.wd), mom = T(c.momentum);
                for (int i = 0; i < n; ++i) {
                    T p = wp[i], g = grad[i];
                    if (c.wd != 0) g += wd * p;
                    T s = a * wsq[i] + ac * g * g;
                    wsq[i] = s;
                    if (c.centered) {
                        T gi = a * wga[i] + ac * g;
                        wga[i] = gi;
                        s -= gi * gi;
                    }
                    T avg = T(std::sqrt(double(s))) + eps;
                    if (c.momentum != 0) {
                        T vv = mom * wvel[i] + g / avg;
                        wvel[i] = vv;
                        wp[i] = p - lr * vv;
                    } else {
                        wp[i] = p - lr * g / avg;
                    }
                }
                emu::launch(KERNEL(rmsprop), sh.grid, sh.block, param.data(), grad.data(), sq.data(),
                            c.centered ? ga.data() : nullptr, c.momentum != 0 ? vel.data() : nullptr, n, c.lr, c.alpha,
                            c.eps, c.wd, c.momentum, c.centered ? 1 : 0);
                err = first({err, compare(fmt("param step %d", step).c_str(), param, wp),
                             compare(fmt("square_avg step %d", step).c_str(), sq, wsq)});
                if (c.centered) err = first({err, compare(fmt("grad_avg step %d", step).c_str(), ga, wga)});
                if (c.momentum != 0) err = first({err, compare(fmt("velocity step %d", step).c_str(), vel, wvel)});
            }
            report(name("rmsprop", tn, fmt("lr=%g alpha=%g eps=%g wd=%g momentum=%g%s%s%s %s", c.lr, c.alpha, c.eps, c.wd,
                                           c.momentum, c.centered ? " centered" : " grad_avg NULL",
                                           c.momentum == 0 ? " velocity NULL" : "", "", sh.str().c_str())),
                   err);
        }
    }
}

template <class T>
void test_all() {
    test_lstm_cell<T>();
    test_lstm_cell_grad<T>();
    test_gru_cell<T>();
    test_gru_cell_grad<T>();
    test_embedding<T>();
    test_embedding_grad<T>();
    test_softmax_xent<T>();
    test_softmax<T>();
    test_dropout<T>();
    test_sum_squares<T>();
    test_sum_rows<T>();
    test_elementwise<T>();
    test_sgd<T>();
    test_adam<T>();
    test_rmsprop<T>();
}

}  // namespace

int main() {
    alarm(300);  // a kernel that deadlocks the emulator (divergent __syncthreads) ends the run
    test_all<float>();
    test_all<double>();
    test_check_ids();
    test_fill_i32();
    std::printf("%d checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
