// Peer benchmark for flashtree issue 6: time llama.cpp's (ggml's) MUL_MAT, y = W·x, as ggml runs it.
//
// Written against ggml's public C API only (ggml.h, ggml-alloc.h, ggml-backend.h); no ggml source is
// copied here. ggml's MUL_MAT convention: W has ne0 = in, ne1 = out (row-major rows of length `in`),
// x has ne0 = in, ne1 = n (f32, as llama.cpp feeds activations), y = mul_mat(W, x) has ne0 = out, ne1 = n,
// y[j][r] = sum_k W[r][k] * x[j][k]. Whatever ggml does internally (quantizing x to q8_1, choosing
// mmvq / mmq / mmf / cuBLAS, CUDA graphs) is part of the measured cost.
//
// Timing: one ggml graph holds `copies` MUL_MAT nodes that share x but each read their own copy of W, so
// that copies * bytes(W) >= --rotate-mib and the L2 cache (50 MB on H100/H200) cannot serve the weights.
// The graph is computed asynchronously `reps` times between two backend synchronizations; one sample is
// wall time / (reps * copies). The reported time is the median of --samples samples (min also given),
// after warm-up runs (which also let ggml's CUDA backend capture its CUDA graph). GB/s = bytes(W) / time.
//
// Check: for every case, 64 rows of copy 0 spread over `out` (first and last included) are recomputed on
// the host in f64 from ggml's own dequantization of the same bytes, for every column j, and compared
// against the backend's y with a bound derived from the activation rounding (see `error_bound`).
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Shape {
    int64_t in;
    int64_t out;
};

struct Case {
    ggml_type type;
    Shape shape;
};

struct Options {
    std::string backend = "auto";  // auto | cuda | cpu | any ggml backend name (CUDA0, CPU)
    std::vector<ggml_type> types;
    std::vector<Shape> shapes;
    bool default_shapes = true;
    std::vector<int64_t> ns = {1, 8, 16, 22, 32};
    std::string csv;
    double rotate_mib = 256.0;
    int samples = 9;
    double sample_ms = 25.0;
    int warmup = 5;
    int threads = 2;  // CPU backend only
    bool check = true;
    int64_t check_row_shift = 0;
    double copy_mib = 1024.0;  // size of the reference copy (0: skip)  // test of the check itself: compare against the wrong rows
};

// The Qwen3.5-27B projection shapes of issue 6, as in→out.
const Shape kDefaultShapes[] = {
    {5120, 10240}, {5120, 6144}, {5120, 17408}, {17408, 5120}, {6144, 5120}, {5120, 12288},
};
// Long launches, as in our bench (benches/benches/qmm.rs): gate and up fused (every type but
// f32) and the output head (the block types), matrices larger than L2 that show a kernel's steady
// state.
const Shape kGateUpShape = {5120, 34816};
const Shape kVocabShape = {5120, 248320};

[[noreturn]] void die(const char * fmt, const char * arg) {
    std::fprintf(stderr, "llamacpp_mul_mat: ");
    std::fprintf(stderr, fmt, arg);
    std::fprintf(stderr, "\n");
    std::exit(1);
}

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (start <= s.size()) {
        size_t end = s.find(sep, start);
        if (end == std::string::npos) {
            end = s.size();
        }
        if (end > start) {
            parts.push_back(s.substr(start, end - start));
        }
        start = end + 1;
    }
    return parts;
}

ggml_type parse_type(const std::string & name) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * tn = ggml_type_name((ggml_type) t);
        if (tn != nullptr && strcasecmp(tn, name.c_str()) == 0) {
            return (ggml_type) t;
        }
    }
    die("unknown ggml type '%s' (expected e.g. q4_K, q5_K, q6_K, q8_0, bf16, f16, f32)", name.c_str());
}

int64_t parse_positive(const std::string & s, const char * what) {
    char * end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (end == s.c_str() || *end != '\0' || v <= 0 || v > (1ll << 40)) {
        die(what, s.c_str());
    }
    return v;
}

Shape parse_shape(const std::string & s) {
    const auto parts = split(s, 'x');
    if (parts.size() != 2) {
        die("bad shape '%s' (expected INxOUT, e.g. 5120x10240)", s.c_str());
    }
    return {parse_positive(parts[0], "bad shape dimension '%s'"), parse_positive(parts[1], "bad shape dimension '%s'")};
}

void usage() {
    std::printf(
        "usage: llamacpp_mul_mat [options]\n"
        "  --backend auto|cuda|cpu|NAME  ggml backend (default auto: first GPU, else CPU)\n"
        "  --types q4_K,q5_K,...         weight types (default q4_K,q5_K,q6_K,q8_0,bf16,f16,f32)\n"
        "  --shapes INxOUT,...           shapes for every type (default: the 6 Qwen3.5-27B shapes,\n"
        "                                plus 5120x34816 but for f32 and 5120x248320 for the block types)\n"
        "  --ns 1,8,16,22,32             token counts n\n"
        "  --csv PATH                    write CSV results\n"
        "  --rotate-mib M                weight copies per case cover at least M MiB (default 256)\n"
        "  --samples S --sample-ms T     S samples of about T ms each (default 9 x 25 ms)\n"
        "  --warmup W                    warm-up graph runs (default 5)\n"
        "  --threads T                   CPU backend threads (default 2)\n"
        "  --copy-mib M                  also time ggml's CPY of M MiB f32 (read+write GB/s; 0: skip)\n"
        "  --no-check                    skip the host f64 check of 64 rows per case\n"
        "  --check-row-shift K           (tests the check) compare row r with W row r+K: must FAIL\n");
}

Options parse_args(int argc, char ** argv) {
    Options o;
    o.types = {GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_0,
               GGML_TYPE_BF16, GGML_TYPE_F16,  GGML_TYPE_F32};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                die("missing value after %s", a.c_str());
            }
            return argv[++i];
        };
        if (a == "--backend") {
            o.backend = value();
        } else if (a == "--types") {
            o.types.clear();
            for (const auto & t : split(value(), ',')) {
                o.types.push_back(parse_type(t));
            }
        } else if (a == "--shapes") {
            o.shapes.clear();
            o.default_shapes = false;
            for (const auto & s : split(value(), ',')) {
                o.shapes.push_back(parse_shape(s));
            }
        } else if (a == "--ns") {
            o.ns.clear();
            for (const auto & s : split(value(), ',')) {
                o.ns.push_back(parse_positive(s, "bad n '%s'"));
            }
        } else if (a == "--csv") {
            o.csv = value();
        } else if (a == "--rotate-mib") {
            o.rotate_mib = std::atof(value().c_str());
        } else if (a == "--samples") {
            o.samples = (int) parse_positive(value(), "bad --samples '%s'");
        } else if (a == "--sample-ms") {
            o.sample_ms = std::atof(value().c_str());
        } else if (a == "--warmup") {
            o.warmup = std::atoi(value().c_str());
        } else if (a == "--threads") {
            o.threads = (int) parse_positive(value(), "bad --threads '%s'");
        } else if (a == "--check-row-shift") {
            o.check_row_shift = parse_positive(value(), "bad --check-row-shift '%s'");
        } else if (a == "--copy-mib") {
            o.copy_mib = std::atof(value().c_str());
        } else if (a == "--no-check") {
            o.check = false;
        } else if (a == "-h" || a == "--help") {
            usage();
            std::exit(0);
        } else {
            die("unknown argument '%s' (try --help)", a.c_str());
        }
    }
    if (o.types.empty() || o.ns.empty() || (!o.default_shapes && o.shapes.empty())) {
        die("%s", "empty --types, --shapes or --ns");
    }
    return o;
}

std::vector<Case> make_cases(const Options & o) {
    std::vector<Case> cases;
    for (ggml_type t : o.types) {
        if (o.default_shapes) {
            for (const Shape & s : kDefaultShapes) {
                cases.push_back({t, s});
            }
            if (t != GGML_TYPE_F32) {
                cases.push_back({t, kGateUpShape});
            }
            if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K || t == GGML_TYPE_Q8_0) {
                cases.push_back({t, kVocabShape});
            }
        } else {
            for (const Shape & s : o.shapes) {
                cases.push_back({t, s});
            }
        }
    }
    return cases;
}

// xorshift64*: fast, deterministic, good enough for benchmark data.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1Dull;
    }
    float uniform(float lo, float hi) { return lo + (hi - lo) * (float) ((next() >> 40) * (1.0 / 16777216.0)); }
};

void put_half(uint8_t * p, float v) {
    const ggml_fp16_t h = ggml_fp32_to_fp16(v);
    std::memcpy(p, &h, sizeof(h));
}

// Where the f16 super-block scales sit in ggml's block layouts (ggml-common.h): every other byte of a
// block is a packed quant or sub-scale, for which any bit pattern is valid.
struct ScaleLayout {
    size_t block_bytes;
    int n_half;
    size_t offsets[2];
};

bool scale_layout(ggml_type t, ScaleLayout * l) {
    switch (t) {
        case GGML_TYPE_Q8_0: *l = {34, 1, {0, 0}}; return true;      // d, qs[32]
        case GGML_TYPE_Q4_K: *l = {144, 2, {0, 2}}; return true;     // d, dmin, scales[12], qs[128]
        case GGML_TYPE_Q5_K: *l = {176, 2, {0, 2}}; return true;     // d, dmin, scales[12], qh[32], qs[128]
        case GGML_TYPE_Q6_K: *l = {210, 1, {208, 0}}; return true;   // ql[128], qh[64], scales[16], d
        default: return false;
    }
}

// Fills one weight matrix (rows * row_bytes) with random but valid data: random quant bytes with
// finite, moderate f16 scales for the block types; uniform(-1, 1) values for the float types.
void fill_weights(ggml_type t, int64_t in, int64_t out, std::vector<uint8_t> & buf, uint64_t seed) {
    Rng rng(seed);
    const size_t nbytes = ggml_row_size(t, in) * (size_t) out;
    buf.resize(nbytes);
    if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
        std::vector<float> row((size_t) in);
        const size_t rb = ggml_row_size(t, in);
        for (int64_t r = 0; r < out; ++r) {
            for (auto & v : row) {
                v = rng.uniform(-1.0f, 1.0f);
            }
            uint8_t * dst = buf.data() + (size_t) r * rb;
            if (t == GGML_TYPE_F32) {
                std::memcpy(dst, row.data(), rb);
            } else if (t == GGML_TYPE_F16) {
                ggml_fp32_to_fp16_row(row.data(), (ggml_fp16_t *) dst, in);
            } else {
                ggml_fp32_to_bf16_row(row.data(), (ggml_bf16_t *) dst, in);
            }
        }
        return;
    }
    ScaleLayout l;
    if (!scale_layout(t, &l)) {
        die("no random-fill rule for weight type %s", ggml_type_name(t));
    }
    if (ggml_type_size(t) != l.block_bytes) {
        die("block size of %s differs from the layout this harness assumes", ggml_type_name(t));
    }
    size_t i = 0;
    for (; i + 8 <= nbytes; i += 8) {
        const uint64_t v = rng.next();
        std::memcpy(buf.data() + i, &v, 8);
    }
    for (; i < nbytes; ++i) {
        buf[i] = (uint8_t) rng.next();
    }
    for (size_t b = 0; b + l.block_bytes <= nbytes; b += l.block_bytes) {
        for (int h = 0; h < l.n_half; ++h) {
            put_half(buf.data() + b + l.offsets[h], rng.uniform(0.5f, 1.5f) * 1e-2f);
        }
    }
}

// f32 values of row r of W, through ggml's own dequantization of the stored bytes.
void dequantize_row(ggml_type t, const uint8_t * row, int64_t in, std::vector<float> & dst) {
    dst.resize((size_t) in);
    if (t == GGML_TYPE_F32) {
        std::memcpy(dst.data(), row, (size_t) in * sizeof(float));
        return;
    }
    const ggml_type_traits * tr = ggml_get_type_traits(t);
    if (tr == nullptr || tr->to_float == nullptr) {
        die("ggml has no to_float for %s", ggml_type_name(t));
    }
    tr->to_float(row, dst.data(), in);
}

// Sums over one output y[j][r] that the check's bound is built from (all in f64, exact W and x).
struct RowStats {
    double abs_wx = 0;     // S  = sum_k |W_rk x_k|
    double sq_wx = 0;      // Q  = sum_k (W_rk x_k)^2
    double sq_w = 0;       // W2 = sum_k W_rk^2
    double block_sum = 0;  // B  = sum over 32-blocks b of |sum_{k in b} x_k| * max_{k in b} |W_rk|
    double x_amax = 0;     // max_k |x_k|
};

// Bound on |y_backend - y_exact| for one output. The rounding errors of x are independent and uniformly
// distributed with random signs, so their sum is bounded statistically at 6 standard deviations (probability
// of exceeding it under the central limit theorem below 1e-8 per output); scale rounding is bounded outright.
// - block-quantized W: ggml quantizes x to 8-bit blocks (q8_1 on CUDA, q8_0/q8_K on CPU) with step
//   d <= amax(x)/127, error per x_k uniform in ±d/2 (std d/sqrt(12)) → 6·sqrt(W2)·amax/(127·sqrt(12)).
//   The block scale d and block sum of x are stored as f16 (relative error 2^-11): at most 2^-11·(S + B);
//   2^-10 doubles it for f32 accumulation.
// - bf16/f32 W: x is rounded to bf16 (unit roundoff 2^-8) or both operands to tf32 (2·2^-11 <= 2^-8) →
//   std <= |W x|·2^-8/sqrt(3) per term → 6·sqrt(Q)·2^-8/sqrt(3), plus 1e-5·S for f32 accumulation.
// - f16 W: cuBLAS may accumulate in f16 (CUBLAS_COMPUTE_16F) with an order we do not know; S·2^-7 is an
//   allowance of 16 f16 roundoffs of the absolute sum, not a proof, and still flags garbage (error ~ S).
double error_bound(ggml_type t, const RowStats & st) {
    if (ggml_is_quantized(t)) {
        return 6.0 * std::sqrt(st.sq_w) * st.x_amax / (127.0 * std::sqrt(12.0)) +
               (st.abs_wx + st.block_sum) / 1024.0 + 1e-9;
    }
    if (t == GGML_TYPE_F16) {
        return st.abs_wx / 128.0 + 1e-9;
    }
    return 6.0 * std::sqrt(st.sq_wx) / (256.0 * std::sqrt(3.0)) + 1e-5 * st.abs_wx + 1e-9;
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Result {
    double us_median = 0, us_min = 0, gbps = 0, check_ratio = -1;
    int copies = 0;
    int64_t reps = 0;
    bool ok = true;
};

ggml_backend_t init_backend(const Options & o) {
    ggml_backend_t b = nullptr;
    if (o.backend == "auto") {
        b = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_GPU, nullptr);
        if (b == nullptr) {
            b = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
        }
    } else if (o.backend == "cuda" || o.backend == "gpu") {
        b = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_GPU, nullptr);
    } else if (o.backend == "cpu") {
        b = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
    } else {
        b = ggml_backend_init_by_name(o.backend.c_str(), nullptr);
    }
    if (b == nullptr) {
        die("could not initialise ggml backend '%s'", o.backend.c_str());
    }
    ggml_backend_dev_t dev = ggml_backend_get_device(b);
    if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) {
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
        auto set_threads =
            (ggml_backend_set_n_threads_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
        if (set_threads != nullptr) {
            set_threads(b, o.threads);
        }
    }
    return b;
}

// Times and checks one (type, shape) for every n; the weight copies are allocated once.
std::vector<Result> run_case(const Options & o, ggml_backend_t backend, const Case & c) {
    const ggml_type t = c.type;
    const int64_t in = c.shape.in, out = c.shape.out;
    std::vector<Result> results(o.ns.size());
    if (in % ggml_blck_size(t) != 0) {
        std::fprintf(stderr, "skip %s %lldx%lld: in is not a multiple of the block size\n", ggml_type_name(t),
                     (long long) in, (long long) out);
        for (auto & r : results) {
            r.ok = false;
        }
        return results;
    }
    const size_t wbytes = ggml_row_size(t, in) * (size_t) out;
    const double rotate_bytes = o.rotate_mib * 1024.0 * 1024.0;
    const int copies = (int) std::min<double>(64.0, std::max(1.0, std::ceil(rotate_bytes / (double) wbytes)));

    // Weights: their own context and buffer, reused for every n.
    ggml_init_params wp = {ggml_tensor_overhead() * (size_t) (copies + 1), nullptr, true};
    ggml_context * wctx = ggml_init(wp);
    std::vector<ggml_tensor *> ws;
    for (int i = 0; i < copies; ++i) {
        ws.push_back(ggml_new_tensor_2d(wctx, t, in, out));
    }
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors(wctx, backend);
    if (wbuf == nullptr) {
        die("could not allocate weight copies for %s", ggml_type_name(t));
    }
    std::vector<uint8_t> w0, scratch;
    const uint64_t seed_base = (uint64_t) t * 1000003ull + (uint64_t) in * 7919ull + (uint64_t) out;
    fill_weights(t, in, out, w0, seed_base);
    ggml_backend_tensor_set(ws[0], w0.data(), 0, wbytes);
    for (int i = 1; i < copies; ++i) {
        fill_weights(t, in, out, scratch, seed_base + (uint64_t) i * 0x1234567ull);
        ggml_backend_tensor_set(ws[(size_t) i], scratch.data(), 0, wbytes);
    }
    scratch.clear();
    scratch.shrink_to_fit();

    // Rows checked against the host: 64 spread over out, including the first and the last.
    std::vector<int64_t> check_rows;
    const int64_t n_check = std::min<int64_t>(64, out);
    for (int64_t i = 0; i < n_check; ++i) {
        check_rows.push_back(n_check == 1 ? 0 : i * (out - 1) / (n_check - 1));
    }
    std::vector<std::vector<float>> w_rows;
    if (o.check) {
        for (int64_t r : check_rows) {
            w_rows.emplace_back();
            const int64_t src = (r + o.check_row_shift) % out;
            dequantize_row(t, w0.data() + (size_t) src * ggml_row_size(t, in), in, w_rows.back());
        }
    }

    for (size_t ni = 0; ni < o.ns.size(); ++ni) {
        const int64_t n = o.ns[ni];
        Result & res = results[ni];
        res.copies = copies;
        const size_t graph_size = (size_t) copies + 16;
        ggml_init_params gp = {ggml_tensor_overhead() * (size_t) (copies + 4) + ggml_graph_overhead_custom(graph_size, false),
                               nullptr, true};
        ggml_context * gctx = ggml_init(gp);
        ggml_tensor * x = ggml_new_tensor_2d(gctx, GGML_TYPE_F32, in, n);
        ggml_cgraph * gf = ggml_new_graph_custom(gctx, graph_size, false);
        std::vector<ggml_tensor *> ys;
        for (int i = 0; i < copies; ++i) {
            ggml_tensor * y = ggml_mul_mat(gctx, ws[(size_t) i], x);
            ys.push_back(y);
            ggml_build_forward_expand(gf, y);
        }
        if (!ggml_backend_supports_op(backend, ys[0])) {
            std::fprintf(stderr, "skip %s %lldx%lld n=%lld: backend does not support this MUL_MAT\n",
                         ggml_type_name(t), (long long) in, (long long) out, (long long) n);
            res.ok = false;
            ggml_free(gctx);
            continue;
        }
        ggml_backend_buffer_t gbuf = ggml_backend_alloc_ctx_tensors(gctx, backend);
        if (gbuf == nullptr) {
            die("could not allocate activations for %s", ggml_type_name(t));
        }
        std::vector<float> xh((size_t) (in * n));
        Rng rng(seed_base ^ (0xABCDEFull + (uint64_t) n));
        for (auto & v : xh) {
            v = rng.uniform(-1.0f, 1.0f);
        }
        ggml_backend_tensor_set(x, xh.data(), 0, xh.size() * sizeof(float));

        auto run_graph = [&]() {
            if (ggml_backend_graph_compute_async(backend, gf) != GGML_STATUS_SUCCESS) {
                die("%s", "ggml_backend_graph_compute_async failed");
            }
        };
        for (int i = 0; i < o.warmup; ++i) {
            run_graph();
        }
        ggml_backend_synchronize(backend);

        if (o.check) {
            std::vector<float> yh((size_t) (out * n));
            ggml_backend_tensor_get(ys[0], yh.data(), 0, yh.size() * sizeof(float));
            double worst = 0;
            for (int64_t j = 0; j < n; ++j) {
                const float * xj = xh.data() + j * in;
                double amax = 0;
                for (int64_t k = 0; k < in; ++k) {
                    amax = std::max(amax, (double) std::fabs(xj[k]));
                }
                for (size_t ri = 0; ri < check_rows.size(); ++ri) {
                    const std::vector<float> & wr = w_rows[ri];
                    RowStats st;
                    st.x_amax = amax;
                    double acc = 0;
                    for (int64_t b0 = 0; b0 < in; b0 += 32) {
                        double bx = 0, bw = 0;
                        for (int64_t k = b0; k < std::min<int64_t>(in, b0 + 32); ++k) {
                            const double w = wr[(size_t) k], xv = xj[k];
                            acc += w * xv;
                            st.abs_wx += std::fabs(w * xv);
                            st.sq_wx += (w * xv) * (w * xv);
                            st.sq_w += w * w;
                            bx += xv;
                            bw = std::max(bw, std::fabs(w));
                        }
                        st.block_sum += std::fabs(bx) * bw;
                    }
                    const double got = yh[(size_t) (j * out + check_rows[ri])];
                    const double err = std::fabs(got - acc);
                    const double ratio =
                        std::isfinite(got) && std::isfinite(acc) ? err / error_bound(t, st) : INFINITY;
                    worst = std::max(worst, ratio);
                }
            }
            res.check_ratio = worst;
            res.ok = worst <= 1.0;
        }

        // Calibrate reps so one sample lasts about sample_ms.
        double t0 = now_s();
        for (int i = 0; i < 3; ++i) {
            run_graph();
        }
        ggml_backend_synchronize(backend);
        const double per_graph = std::max(1e-7, (now_s() - t0) / 3.0);
        const int64_t reps = std::max<int64_t>(1, (int64_t) std::ceil(o.sample_ms * 1e-3 / per_graph));
        res.reps = reps;

        std::vector<double> us;
        for (int s = 0; s < o.samples; ++s) {
            const double ts = now_s();
            for (int64_t r = 0; r < reps; ++r) {
                run_graph();
            }
            ggml_backend_synchronize(backend);
            us.push_back((now_s() - ts) * 1e6 / (double) (reps * copies));
        }
        std::sort(us.begin(), us.end());
        res.us_median = us[us.size() / 2];
        res.us_min = us.front();
        res.gbps = (double) wbytes / (res.us_median * 1e-6) / 1e9;

        ggml_backend_buffer_free(gbuf);
        ggml_free(gctx);
    }
    ggml_backend_buffer_free(wbuf);
    ggml_free(wctx);
    return results;
}

// ggml's own device copy (CPY f32 -> f32 of copy_mib MiB) as the bandwidth yardstick of this run:
// GB/s counts the bytes read plus the bytes written.
void report_copy(const Options & o, ggml_backend_t backend) {
    if (o.copy_mib <= 0) {
        return;
    }
    const int64_t n = (int64_t) (o.copy_mib * 1024.0 * 1024.0 / sizeof(float));
    ggml_init_params p = {ggml_tensor_overhead() * 4 + ggml_graph_overhead_custom(8, false), nullptr, true};
    ggml_context * ctx = ggml_init(p);
    ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_tensor * b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, 8, false);
    ggml_build_forward_expand(gf, ggml_cpy(ctx, a, b));
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (buf == nullptr) {
        std::printf("copy: could not allocate 2 x %.0f MiB, skipped\n", o.copy_mib);
        ggml_free(ctx);
        return;
    }
    ggml_backend_tensor_memset(a, 0x3c, 0, ggml_nbytes(a));
    for (int i = 0; i < std::max(1, o.warmup); ++i) {
        ggml_backend_graph_compute(backend, gf);
    }
    const double t0 = now_s();
    ggml_backend_graph_compute(backend, gf);
    const double per = std::max(1e-7, now_s() - t0);
    const int64_t reps = std::max<int64_t>(1, (int64_t) std::ceil(o.sample_ms * 1e-3 / per));
    std::vector<double> us;
    for (int s = 0; s < o.samples; ++s) {
        const double ts = now_s();
        for (int64_t r = 0; r < reps; ++r) {
            ggml_backend_graph_compute_async(backend, gf);
        }
        ggml_backend_synchronize(backend);
        us.push_back((now_s() - ts) * 1e6 / (double) reps);
    }
    std::sort(us.begin(), us.end());
    const double med = us[us.size() / 2];
    std::printf("copy: ggml CPY f32 %.0f MiB: %.1f us median, %.1f GB/s (read + write)\n", o.copy_mib, med,
                2.0 * (double) ggml_nbytes(a) / (med * 1e-6) / 1e9);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

}  // namespace

int main(int argc, char ** argv) {
    const Options o = parse_args(argc, argv);
    ggml_backend_t backend = init_backend(o);
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    std::string device = std::string(ggml_backend_dev_name(dev)) + " " + ggml_backend_dev_description(dev);
    for (char & ch : device) {
        if (ch == ',') {
            ch = ';';
        }
    }
    std::printf("llamacpp_mul_mat: backend %s, device %s\n", ggml_backend_name(backend), device.c_str());
    std::printf("rotation >= %.0f MiB of weight copies, %d samples x ~%.0f ms, median\n", o.rotate_mib, o.samples,
                o.sample_ms);

    report_copy(o, backend);

    FILE * csv = nullptr;
    if (!o.csv.empty()) {
        csv = std::fopen(o.csv.c_str(), "w");
        if (csv == nullptr) {
            die("cannot open CSV file '%s' for writing", o.csv.c_str());
        }
        std::fprintf(csv, "type,in,out,n,us_median,gbps,us_min,weight_bytes,copies,reps,check_ratio,check_ok,device\n");
    }

    std::printf("%-5s %6s %7s %3s %10s %10s %8s %8s %6s %7s\n", "type", "in", "out", "n", "us_median", "us_min",
                "GB/s", "t/t(1)", "copies", "check");
    int failures = 0;
    for (const Case & c : make_cases(o)) {
        const std::vector<Result> rs = run_case(o, backend, c);
        const size_t wbytes = ggml_row_size(c.type, c.shape.in) * (size_t) c.shape.out;
        double t1 = 0;
        for (size_t ni = 0; ni < rs.size(); ++ni) {
            const Result & r = rs[ni];
            if (r.copies == 0 || r.us_median == 0) {
                ++failures;
                continue;
            }
            if (o.ns[ni] == 1) {
                t1 = r.us_median;
            }
            if (!r.ok) {
                ++failures;
            }
            char check[32];
            if (r.check_ratio < 0) {
                std::snprintf(check, sizeof check, "-");
            } else {
                std::snprintf(check, sizeof check, "%s%.2f", r.ok ? "" : "FAIL ", r.check_ratio);
            }
            std::printf("%-5s %6lld %7lld %3lld %10.2f %10.2f %8.1f %8s %6d %7s\n", ggml_type_name(c.type),
                        (long long) c.shape.in, (long long) c.shape.out, (long long) o.ns[ni], r.us_median, r.us_min,
                        r.gbps, t1 > 0 ? std::to_string(r.us_median / t1).substr(0, 5).c_str() : "-", r.copies,
                        check);
            std::fflush(stdout);
            if (csv != nullptr) {
                std::fprintf(csv, "%s,%lld,%lld,%lld,%.3f,%.2f,%.3f,%zu,%d,%lld,%.4f,%d,%s\n", ggml_type_name(c.type),
                             (long long) c.shape.in, (long long) c.shape.out, (long long) o.ns[ni], r.us_median, r.gbps,
                             r.us_min, wbytes, r.copies, (long long) r.reps, r.check_ratio, r.ok ? 1 : 0,
                             device.c_str());
                std::fflush(csv);
            }
        }
    }
    if (csv != nullptr) {
        std::fclose(csv);
    }
    ggml_backend_free(backend);
    if (failures > 0) {
        std::printf("llamacpp_mul_mat: %d case(s) failed the check or were skipped\n", failures);
        return 2;
    }
    std::printf("llamacpp_mul_mat: all cases checked\n");
    return 0;
}
