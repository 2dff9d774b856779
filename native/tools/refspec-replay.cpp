// refspec-replay: rebuild the non-flash attention subgraph of one llama.cpp layer on frozen
// operands in four layouts (mq, pq, qb, qh), compute it on a chosen ggml backend and write the
// stage outputs (QK = kq, softmax = kq_soft_max, AV = kqv, restored output) plus a JSON report
// of every node's descriptors, its placement and each backend's supports_op answer.
//
// The operand and stage file format is documented in anc/operands.md. The layouts follow the
// patched llm_graph_context::build_attn_mha (non-flash branch); see anc/e1.md.
//
// usage: refspec-replay [options] [OPERAND_FILE ...]
//   --backend NAME      device name (CPU, CUDA0, Vulkan0, ...) or registry name (CUDA, Vulkan)
//   --threads N         threads for backends that take a thread count (default 1)
//   --layouts L[,L..]   layouts to evaluate for positional inputs (default mq,pq,qb,qh)
//   --fault NAME        inject a representation fault into qb (audit only; see anc/audit.md)
//   --out-dir DIR       where stage files of positional inputs go (default: next to the input)
//   --jobs FILE         JSON list of jobs: [{"input", "layouts", "fault", "out_prefix", "write_stages"}]
//   --report FILE       write the JSON report there (default: stdout)
//   --no-stages         do not write stage files (placement/supports report only)
//   --backend-dir DIR   load dynamic ggml backends from DIR first (GGML_BACKEND_DL builds)
//   --list-devices      print the devices as JSON and exit
// exit status: 0 all evaluations ok, 1 at least one job or evaluation failed, 2 usage error.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using json = nlohmann::ordered_json;

namespace {

constexpr char kMagic[8] = {'R', 'F', 'S', 'P', 'O', 'P', 'S', '1'};
constexpr size_t kAlign = 64;
constexpr int kFormatVersion = 1;

struct ReplayError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string & msg) { throw ReplayError(msg); }

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// ---------------------------------------------------------------------------------------------
// container: magic | u64 header length | JSON header | pad to 64 | blobs (each 64-aligned)

struct TensorDesc {
    std::string name;
    ggml_type type = GGML_TYPE_F32;
    int64_t ne[4] = {1, 1, 1, 1};
    size_t nb[4] = {0, 0, 0, 0};
    size_t offset = 0;     // byte offset of the view inside its blob
    size_t blob_offset = 0;  // relative to the data section
    size_t blob_size = 0;
};

struct Container {
    json header;
    std::vector<uint8_t> bytes;  // whole file
    size_t data_start = 0;
};

ggml_type parse_type(const std::string & s) {
    if (s == "f32") return GGML_TYPE_F32;
    if (s == "f16") return GGML_TYPE_F16;
    fail("unsupported tensor type '" + s + "' (f32 and f16 only)");
}

const char * type_str(ggml_type t) { return t == GGML_TYPE_F16 ? "f16" : (t == GGML_TYPE_F32 ? "f32" : ggml_type_name(t)); }

Container read_container(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open " + path);
    Container c;
    c.bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (c.bytes.size() < 16 || std::memcmp(c.bytes.data(), kMagic, 8) != 0) {
        fail(path + ": not a refspec operand file (bad magic)");
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= uint64_t(c.bytes[8 + i]) << (8 * i);
    if (hlen > c.bytes.size() - 16) fail(path + ": truncated header");
    try {
        c.header = json::parse(c.bytes.begin() + 16, c.bytes.begin() + 16 + hlen);
    } catch (const std::exception & e) {
        fail(path + ": header is not valid JSON: " + e.what());
    }
    c.data_start = align_up(16 + hlen, kAlign);
    if (!c.header.contains("version") || c.header["version"].get<int>() != kFormatVersion) {
        fail(path + ": unsupported format version");
    }
    return c;
}

TensorDesc tensor_desc(const Container & c, const std::string & name, const std::string & path) {
    const auto & ts = c.header.at("tensors");
    if (!ts.contains(name)) fail(path + ": missing tensor '" + name + "'");
    const auto & t = ts.at(name);
    TensorDesc d;
    d.name = name;
    d.type = parse_type(t.at("type").get<std::string>());
    const auto & ne = t.at("ne");
    const auto & nb = t.at("nb");
    if (ne.size() != 4 || nb.size() != 4) fail(path + ": tensor '" + name + "' needs 4 ne and 4 nb");
    for (int i = 0; i < 4; i++) {
        d.ne[i] = ne[i].get<int64_t>();
        d.nb[i] = nb[i].get<size_t>();
        if (d.ne[i] < 1) fail(path + ": tensor '" + name + "' has a non-positive extent");
    }
    d.offset = t.at("offset").get<size_t>();
    d.blob_offset = t.at("blob").at("offset").get<size_t>();
    d.blob_size = t.at("blob").at("size").get<size_t>();
    const size_t ts_ = ggml_type_size(d.type);
    if (d.nb[0] != ts_) fail(path + ": tensor '" + name + "' is not contiguous in dim 0 (nb0 != element size)");
    if (d.blob_size % ts_ != 0 || d.offset % ts_ != 0) fail(path + ": tensor '" + name + "' blob/offset not a multiple of the element size");
    size_t last = d.offset;
    for (int i = 0; i < 4; i++) last += size_t(d.ne[i] - 1) * d.nb[i];
    if (last + ts_ > d.blob_size) fail(path + ": tensor '" + name + "' view reaches past its blob");
    if (c.data_start + d.blob_offset + d.blob_size > c.bytes.size()) fail(path + ": tensor '" + name + "' blob is truncated");
    return d;
}

void write_container(const std::string & path, const json & header, const std::vector<std::vector<uint8_t>> & blobs) {
    std::string h = header.dump();
    std::vector<uint8_t> out(16 + h.size());
    std::memcpy(out.data(), kMagic, 8);
    uint64_t hlen = h.size();
    for (int i = 0; i < 8; i++) out[8 + i] = uint8_t(hlen >> (8 * i));
    std::memcpy(out.data() + 16, h.data(), h.size());
    out.resize(align_up(out.size(), kAlign), 0);
    for (const auto & b : blobs) {
        out.insert(out.end(), b.begin(), b.end());
        out.resize(align_up(out.size(), kAlign), 0);
    }
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) fail("cannot write " + tmp);
        f.write(reinterpret_cast<const char *>(out.data()), std::streamsize(out.size()));
        if (!f) fail("write failed: " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp);
}

// ---------------------------------------------------------------------------------------------
// operands

struct Operands {
    std::string path;
    Container c;
    TensorDesc q, k, v, mask;
    float scale = 1.0f;
    float max_bias = 0.0f;
    int64_t n_q = 0, n_head = 0, n_head_kv = 0, d = 0, d_v = 0, n_kv = 0;
};

float f32_from_hex(const std::string & s) {
    uint32_t bits = uint32_t(std::stoul(s, nullptr, 16));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

Operands load_operands(const std::string & path) {
    Operands o;
    o.path = path;
    o.c = read_container(path);
    if (o.c.header.value("format", "") != "refspec-operands") fail(path + ": not an operand file (format)");
    o.q = tensor_desc(o.c, "q", path);
    o.k = tensor_desc(o.c, "k", path);
    o.v = tensor_desc(o.c, "v", path);
    o.mask = tensor_desc(o.c, "mask", path);
    const auto & a = o.c.header.at("attention");
    o.scale = a.contains("scale_f32_bits") ? f32_from_hex(a.at("scale_f32_bits").get<std::string>()) : float(a.at("scale").get<double>());
    o.max_bias = a.contains("max_bias_f32_bits") ? f32_from_hex(a.at("max_bias_f32_bits").get<std::string>()) : float(a.value("max_bias", 0.0));
    if (a.value("gqa", std::string("contiguous")) != "contiguous") fail(path + ": only contiguous-group GQA is representable in ggml");

    if (o.q.type != GGML_TYPE_F32) fail(path + ": q must be f32");
    if (o.k.type != GGML_TYPE_F16 || o.v.type != GGML_TYPE_F16) fail(path + ": k and v must be f16");
    if (o.mask.type != GGML_TYPE_F32) fail(path + ": mask must be f32");
    o.d = o.q.ne[0];
    o.n_q = o.q.ne[1];
    o.n_head = o.q.ne[2];
    o.n_kv = o.k.ne[1];
    o.n_head_kv = o.k.ne[2];
    o.d_v = o.v.ne[1];
    if (o.q.ne[3] != 1 || o.k.ne[3] != 1 || o.v.ne[3] != 1 || o.mask.ne[2] != 1 || o.mask.ne[3] != 1) {
        fail(path + ": one sequence/stream only (dim 3 must be 1)");
    }
    if (o.k.ne[0] != o.d) fail(path + ": k head dim differs from q head dim");
    if (o.v.ne[0] != o.n_kv) fail(path + ": v (transposed) key extent differs from k");
    if (o.v.ne[2] != o.n_head_kv) fail(path + ": v and k head counts differ");
    if (o.n_head % o.n_head_kv != 0) fail(path + ": query heads are not a multiple of kv heads");
    if (o.mask.ne[0] != o.n_kv) fail(path + ": mask key extent differs from k");
    if (o.mask.ne[1] < o.n_q) fail(path + ": mask has fewer rows than queries");
    if (o.mask.nb[1] != size_t(o.n_kv) * sizeof(float)) fail(path + ": mask rows must be contiguous (nb1 == n_kv*4)");
    if (a.contains("n_q") && a.at("n_q").get<int64_t>() != o.n_q) fail(path + ": attention.n_q differs from q extent");
    if (a.contains("n_head") && a.at("n_head").get<int64_t>() != o.n_head) fail(path + ": attention.n_head differs from q");
    if (a.contains("n_head_kv") && a.at("n_head_kv").get<int64_t>() != o.n_head_kv) fail(path + ": attention.n_head_kv differs from k");
    if (a.contains("n_kv") && a.at("n_kv").get<int64_t>() != o.n_kv) fail(path + ": attention.n_kv differs from k");
    return o;
}

// ---------------------------------------------------------------------------------------------
// backends

struct Backends {
    ggml_backend_t main = nullptr;  // the chosen backend
    ggml_backend_t cpu = nullptr;   // fallback (== main when CPU is chosen)
    ggml_backend_dev_t main_dev = nullptr;
    std::vector<ggml_backend_t> list;  // sched order: main first, CPU last
    std::vector<ggml_backend_dev_t> all_devs;
};

const char * dev_type_str(enum ggml_backend_dev_type t) {
    switch (t) {
        case GGML_BACKEND_DEVICE_TYPE_CPU: return "cpu";
        case GGML_BACKEND_DEVICE_TYPE_GPU: return "gpu";
        case GGML_BACKEND_DEVICE_TYPE_IGPU: return "igpu";
        case GGML_BACKEND_DEVICE_TYPE_ACCEL: return "accel";
        default: return "other";
    }
}

json devices_json() {
    json arr = json::array();
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        size_t free_ = 0, total = 0;
        ggml_backend_dev_memory(dev, &free_, &total);
        arr.push_back({{"name", ggml_backend_dev_name(dev)},
                       {"description", ggml_backend_dev_description(dev)},
                       {"type", dev_type_str(ggml_backend_dev_type(dev))},
                       {"registry", ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev))},
                       {"memory_total", total}});
    }
    return arr;
}

void set_threads(ggml_backend_t b, int n) {
    ggml_backend_dev_t dev = ggml_backend_get_device(b);
    if (!dev) return;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    auto fn = reinterpret_cast<ggml_backend_set_n_threads_t>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads"));
    if (fn) fn(b, n);
}

Backends init_backends(const std::string & name, int threads) {
    Backends B;
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(name.c_str());
    if (!dev) {
        ggml_backend_reg_t reg = ggml_backend_reg_by_name(name.c_str());
        if (reg && ggml_backend_reg_dev_count(reg) > 0) dev = ggml_backend_reg_dev_get(reg, 0);
    }
    if (!dev) fail("no ggml device or registry named '" + name + "' (see --list-devices)");
    B.main_dev = dev;
    B.main = ggml_backend_dev_init(dev, nullptr);
    if (!B.main) fail("cannot initialise backend '" + name + "'");
    set_threads(B.main, threads);
    B.list.push_back(B.main);
    if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) {
        B.cpu = B.main;
    } else {
        ggml_backend_dev_t cdev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        if (!cdev) fail("no CPU device for the fallback");
        B.cpu = ggml_backend_dev_init(cdev, nullptr);
        if (!B.cpu) fail("cannot initialise the CPU fallback backend");
        set_threads(B.cpu, threads);
        B.list.push_back(B.cpu);
    }
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) B.all_devs.push_back(ggml_backend_dev_get(i));
    return B;
}

// ---------------------------------------------------------------------------------------------
// graph construction

bool is_view_op(ggml_op op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_PERMUTE || op == GGML_OP_RESHAPE || op == GGML_OP_TRANSPOSE;
}

struct Stage {
    std::vector<ggml_tensor *> kq, sm, kqv;  // one entry (mq, qb, qh) or one per query (pq)
    int64_t batch_queries = 0;  // qh: the batch axis (dim 2) holds queries x heads, written as (.., query, head)
    ggml_tensor * out = nullptr;
    std::vector<std::string> axes_kq, axes_kqv;
};

struct Bases {
    ggml_tensor * q = nullptr;
    ggml_tensor * k = nullptr;
    ggml_tensor * v = nullptr;
    ggml_tensor * mask = nullptr;
};

void attn_core(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask, float scale,
               float max_bias, const std::string & sfx, Stage & st) {
    ggml_tensor * kq = ggml_mul_mat(ctx, k, q);
    ggml_set_name(kq, ("kq" + sfx).c_str());
    ggml_prec_set_acc(kq, GGML_PREC_F32);
    ggml_tensor * sm = ggml_soft_max_ext(ctx, kq, mask, scale, max_bias);
    ggml_set_name(sm, ("kq_soft_max" + sfx).c_str());
    ggml_tensor * kqv = ggml_mul_mat(ctx, v, sm);
    ggml_set_name(kqv, ("kqv" + sfx).c_str());
    for (ggml_tensor * t : {kq, sm, kqv}) ggml_set_output(t);
    st.kq.push_back(kq);
    st.sm.push_back(sm);
    st.kqv.push_back(kqv);
}

const std::vector<std::string> kFaults = {"none", "gqa_interleaved", "mask_shared", "output_swapped", "stride_off_by_one"};

Stage build_layout(ggml_context * ctx, const std::string & layout, const std::string & fault, const Operands & o,
                   ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask) {
    Stage st;
    const int64_t d = o.d, h = o.n_head, nq = o.n_q, nkv = o.n_kv, dv = o.d_v;
    if (fault != "none" && layout != "qb") fail("faults are injected into qb only");
    if (layout == "mq") {
        attn_core(ctx, q, k, v, mask, o.scale, o.max_bias, "", st);
        ggml_tensor * cur = ggml_permute(ctx, st.kqv[0], 0, 2, 1, 3);
        st.out = ggml_cont_2d(ctx, cur, dv * h, nq);
        st.axes_kq = {"key", "query", "head", "one"};
        st.axes_kqv = {"chan", "query", "head", "one"};
    } else if (layout == "qb") {
        size_t q_nb3 = q->nb[1];
        if (fault == "stride_off_by_one") q_nb3 = q->nb[1] - ggml_type_size(q->type);
        ggml_tensor * qv = ggml_view_4d(ctx, q, d, 1, h, nq, q->nb[1], q->nb[2], q_nb3, 0);
        ggml_set_name(qv, "q_qb");
        ggml_tensor * mv = fault == "mask_shared"
            ? ggml_view_4d(ctx, mask, nkv, 1, 1, 1, mask->nb[1], mask->nb[1], mask->nb[1], 0)
            : ggml_view_4d(ctx, mask, nkv, 1, 1, nq, mask->nb[1], mask->nb[1], mask->nb[1], 0);
        ggml_set_name(mv, "mask_qb");
        ggml_tensor * kk = k;
        ggml_tensor * vv = v;
        if (fault == "gqa_interleaved") {
            // expanding the KV heads by tiling gives q head i the kv head i % n_head_kv
            kk = ggml_repeat_4d(ctx, k, k->ne[0], k->ne[1], h, 1);
            vv = ggml_repeat_4d(ctx, v, v->ne[0], v->ne[1], h, 1);
        }
        attn_core(ctx, qv, kk, vv, mv, o.scale, o.max_bias, "", st);
        ggml_tensor * cur = st.kqv[0];
        if (fault == "output_swapped") cur = ggml_cont(ctx, ggml_permute(ctx, cur, 0, 3, 2, 1));
        st.out = ggml_cont_2d(ctx, cur, dv * h, nq);
        st.axes_kq = {"key", "one", "head", "query"};
        st.axes_kqv = {"chan", "one", "head", "query"};
    } else if (layout == "qh") {
        // queries folded into the head batch axis: q copied into (d, n_q, h) order and viewed as
        // (d, 1, n_q*h, 1), batch j = head*n_q + qi; K/V broadcast over dim 2 only (j / (r*n_q) =
        // head / r); the mask viewed as (n_kv, 1, n_q, 1), row j % n_q = qi
        if (o.max_bias > 0.0f) fail("qh: ALiBi takes each head's slope from the batch axis, which qh fills with queries; refused");
        ggml_tensor * qc = ggml_cont(ctx, q);
        ggml_set_name(qc, "q_qh");
        // the view keeps PQ's 0213 stride order (row stride above the batch stride): a backend that
        // picks its kernel by strides takes the same one for both (ggml-vulkan: mul_mat_vec_p021)
        ggml_tensor * qv = ggml_view_4d(ctx, qc, d, 1, nq * h, 1, qc->nb[3], qc->nb[1], qc->nb[3], 0);
        ggml_tensor * mv = ggml_view_4d(ctx, mask, nkv, 1, nq, 1, mask->nb[1], mask->nb[1], size_t(nq) * mask->nb[1], 0);
        ggml_set_name(mv, "mask_qh");
        attn_core(ctx, qv, k, v, mv, o.scale, o.max_bias, "", st);
        ggml_tensor * cur = ggml_permute(ctx, ggml_reshape_3d(ctx, st.kqv[0], dv, nq, h), 0, 2, 1, 3);
        st.out = ggml_cont_2d(ctx, cur, dv * h, nq);
        st.batch_queries = nq;
        st.axes_kq = {"key", "one", "query", "head"};
        st.axes_kqv = {"chan", "one", "query", "head"};
    } else if (layout == "pq") {
        ggml_tensor * cat = nullptr;
        for (int64_t j = 0; j < nq; j++) {
            ggml_tensor * qj = ggml_view_4d(ctx, q, d, 1, h, 1, q->nb[1], q->nb[2], q->nb[1], size_t(j) * q->nb[1]);
            ggml_set_name(qj, ("q_pq-" + std::to_string(j)).c_str());
            ggml_tensor * mj = ggml_view_4d(ctx, mask, nkv, 1, 1, 1, mask->nb[1], mask->nb[1], mask->nb[1], size_t(j) * mask->nb[1]);
            ggml_set_name(mj, ("mask_pq-" + std::to_string(j)).c_str());
            attn_core(ctx, qj, k, v, mj, o.scale, o.max_bias, "-" + std::to_string(j), st);
            cat = cat ? ggml_concat(ctx, cat, st.kqv.back(), 3) : st.kqv.back();
        }
        st.out = ggml_cont_2d(ctx, cat, dv * h, nq);
        st.axes_kq = {"key", "one", "head", "query"};
        st.axes_kqv = {"chan", "one", "head", "query"};
    } else {
        fail("unknown layout '" + layout + "' (mq, pq, qb, qh)");
    }
    ggml_set_name(st.out, "kqv_out");
    ggml_set_output(st.out);
    return st;
}

// ---------------------------------------------------------------------------------------------
// reporting

// The graph as built, indexed before the scheduler sees it: when a node runs on another backend
// than its input, ggml_backend_sched_alloc_graph reroutes the node's src to a copy it makes in
// its own context, so the built nodes are no longer reachable from the output afterwards. The
// sources are therefore recorded here, and node_json reports a rerouted input as a copy.
struct NodeIndex {
    std::map<const ggml_tensor *, int> id;
    std::vector<ggml_tensor *> order;
    std::map<const ggml_tensor *, std::vector<ggml_tensor *>> src;
    void visit(ggml_tensor * t) {
        if (!t || id.count(t)) return;
        std::vector<ggml_tensor *> s(GGML_MAX_SRC, nullptr);
        for (int i = 0; i < GGML_MAX_SRC; i++) {
            s[i] = t->src[i];
            visit(t->src[i]);
        }
        if (t->view_src) visit(t->view_src);
        src[t] = s;
        id[t] = int(order.size());
        order.push_back(t);
    }
};

json op_params_json(const ggml_tensor * t) {
    json p = json::object();
    if (t->op == GGML_OP_SOFT_MAX) {
        float scale, max_bias;
        std::memcpy(&scale, (const float *) t->op_params + 0, 4);
        std::memcpy(&max_bias, (const float *) t->op_params + 1, 4);
        uint32_t bits;
        std::memcpy(&bits, &scale, 4);
        char hex[16];
        std::snprintf(hex, sizeof(hex), "%08x", bits);
        p["scale"] = scale;
        p["scale_f32_bits"] = hex;
        p["max_bias"] = max_bias;
    } else if (t->op == GGML_OP_CONCAT) {
        p["dim"] = ((const int32_t *) t->op_params)[0];
    } else if (t->op == GGML_OP_MUL_MAT) {
        p["prec_f32"] = ((const int32_t *) t->op_params)[0] == GGML_PREC_F32;
    }
    return p;
}

json node_json(const ggml_tensor * t, const NodeIndex & ix, const Backends & B, ggml_backend_sched_t sched,
               const std::map<const ggml_tensor *, std::string> & pinned, const std::map<const ggml_tensor *, std::string> & operand) {
    json n;
    n["id"] = ix.id.at(t);
    n["name"] = ggml_get_name(t);
    n["op"] = ggml_op_name(t->op);
    n["type"] = type_str(t->type);
    n["ne"] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
    n["nb"] = {t->nb[0], t->nb[1], t->nb[2], t->nb[3]};
    n["view_src"] = t->view_src ? json(ix.id.at(t->view_src)) : json(nullptr);
    n["view_offs"] = t->view_offs;
    json src = json::array();
    json copied = json::array();
    const auto & built = ix.src.at(t);
    for (int i = 0; i < GGML_MAX_SRC; i++) {
        if (built[i]) {
            while (src.size() < size_t(i)) src.push_back(nullptr);
            src.push_back(ix.id.at(built[i]));
            // the scheduler copied this input to the node's backend (a cross-backend split)
            if (t->src[i] != built[i]) copied.push_back(i);
        }
    }
    n["src"] = src;
    n["src_copied"] = copied;
    n["op_params"] = op_params_json(t);
    auto op_it = operand.find(t);
    n["operand"] = op_it == operand.end() ? json(nullptr) : json(op_it->second);
    n["contiguous"] = ggml_is_contiguous(t);
    ggml_backend_t b = ggml_backend_sched_get_tensor_backend(sched, const_cast<ggml_tensor *>(t));
    n["backend"] = b ? json(ggml_backend_name(b)) : json(nullptr);
    auto pit = pinned.find(t);
    n["pinned"] = pit == pinned.end() ? json(nullptr) : json(pit->second);
    json sup = json::object();
    for (ggml_backend_t be : B.list) sup[ggml_backend_name(be)] = ggml_backend_supports_op(be, t);
    n["supports_op"] = sup;
    json dsup = json::object();
    for (ggml_backend_dev_t dev : B.all_devs) dsup[ggml_backend_dev_name(dev)] = ggml_backend_dev_supports_op(dev, t);
    n["dev_supports_op"] = dsup;
    return n;
}

std::vector<uint8_t> read_tensor(const ggml_tensor * t) {
    if (!ggml_is_contiguous(t)) fail(std::string("stage tensor ") + ggml_get_name(t) + " is not contiguous");
    std::vector<uint8_t> buf(ggml_nbytes(t));
    ggml_backend_tensor_get(t, buf.data(), 0, buf.size());
    return buf;
}

json stage_entry(ggml_type type, const std::vector<int64_t> & ne, const std::vector<std::string> & axes, size_t blob_offset, size_t size) {
    const size_t ts = ggml_type_size(type);
    json e;
    e["type"] = type_str(type);
    e["ne"] = ne;
    e["nb"] = {ts, ts * ne[0], ts * ne[0] * ne[1], ts * ne[0] * ne[1] * ne[2]};
    e["offset"] = 0;
    e["axes"] = axes;
    e["blob"] = {{"offset", blob_offset}, {"size", size}};
    return e;
}

void write_stages(const std::string & path, const Operands & o, const std::string & layout, const std::string & fault,
                  const std::string & backend, const Stage & st) {
    json header;
    header["format"] = "refspec-stages";
    header["version"] = kFormatVersion;
    header["layout"] = layout;
    header["fault"] = fault;
    header["backend"] = backend;
    header["source"] = o.path;
    header["attention"] = o.c.header.at("attention");
    json tensors = json::object();
    std::vector<std::vector<uint8_t>> blobs;
    size_t off = 0;
    auto add = [&](const std::string & name, const std::vector<ggml_tensor *> & parts, const std::vector<std::string> & axes) {
        std::vector<uint8_t> all;
        std::vector<int64_t> ne = {parts[0]->ne[0], parts[0]->ne[1], parts[0]->ne[2], parts[0]->ne[3]};
        for (size_t i = 0; i < parts.size(); i++) {
            auto b = read_tensor(parts[i]);
            all.insert(all.end(), b.begin(), b.end());
        }
        if (parts.size() > 1) ne[3] = int64_t(parts.size());  // pq: per-query nodes stacked along dim 3
        if (st.batch_queries > 0) ne = {ne[0], ne[1], st.batch_queries, ne[2] / st.batch_queries};  // qh: (.., n_q, h)
        tensors[name] = stage_entry(parts[0]->type, ne, axes, off, all.size());
        off = align_up(off + all.size(), kAlign);
        blobs.push_back(std::move(all));
    };
    add("kq", st.kq, st.axes_kq);
    add("kq_soft_max", st.sm, st.axes_kq);
    add("kqv", st.kqv, st.axes_kqv);
    {
        // restored output (d_v*h, n_q) written as (d_v, h, n_q, 1): identical memory order
        auto b = read_tensor(st.out);
        std::vector<int64_t> ne = {o.d_v, o.n_head, o.n_q, 1};
        tensors["out"] = stage_entry(st.out->type, ne, {"chan", "head", "query", "one"}, off, b.size());
        off = align_up(off + b.size(), kAlign);
        blobs.push_back(std::move(b));
    }
    header["tensors"] = tensors;
    write_container(path, header, blobs);
}

// ---------------------------------------------------------------------------------------------
// one evaluation

json evaluate(const Backends & B, ggml_backend_sched_t sched, const Operands & o, const Bases & bases, const std::string & layout,
              const std::string & fault, const std::string & stage_path) {
    json ev;
    ev["layout"] = layout;
    ev["fault"] = fault;
    const size_t ctx_size = ggml_tensor_overhead() * 1024 + ggml_graph_overhead_custom(1024, false);
    ggml_init_params ip = {ctx_size, nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(ip), ggml_free);
    if (!ctx) fail("ggml_init failed");
    ggml_context * c = ctx.get();

    // the operand views as llama.cpp's non-flash branch sees them after its permutes
    auto view_of = [&](ggml_tensor * base, const TensorDesc & td, const char * name) {
        ggml_tensor * t = ggml_view_4d(c, base, td.ne[0], td.ne[1], td.ne[2], td.ne[3], td.nb[1], td.nb[2], td.nb[3], td.offset);
        ggml_set_name(t, name);
        return t;
    };
    ggml_tensor * q = view_of(bases.q, o.q, "q");
    ggml_tensor * k = view_of(bases.k, o.k, "k");
    ggml_tensor * v = view_of(bases.v, o.v, "v");
    ggml_tensor * m = view_of(bases.mask, o.mask, "kq_mask");

    Stage st = build_layout(c, layout, fault, o, q, k, v, m);
    ggml_cgraph * gf = ggml_new_graph_custom(c, 1024, false);
    ggml_build_forward_expand(gf, st.out);

    // pin every compute node to the chosen backend where it says it supports the op; the rest
    // is left to the scheduler (CPU fallback) and is reported as observed
    ggml_backend_sched_reset(sched);
    std::map<const ggml_tensor *, std::string> pinned;
    json refused = json::array();
    for (int i = 0; i < ggml_graph_n_nodes(gf); i++) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        if (is_view_op(node->op)) continue;
        if (ggml_backend_supports_op(B.main, node)) {
            ggml_backend_sched_set_tensor_backend(sched, node, B.main);
            pinned[node] = ggml_backend_name(B.main);
        } else {
            refused.push_back(ggml_get_name(node));
        }
    }
    NodeIndex ix;  // before the scheduler reroutes inputs (see NodeIndex)
    ix.visit(st.out);
    for (const auto * group : {&st.kq, &st.sm, &st.kqv})
        for (auto * t : *group) ix.visit(t);
    ix.visit(q);
    if (!ggml_backend_sched_alloc_graph(sched, gf)) fail("ggml_backend_sched_alloc_graph failed");
    auto t0 = std::chrono::steady_clock::now();
    ggml_status status = ggml_backend_sched_graph_compute(sched, gf);
    ggml_backend_sched_synchronize(sched);
    auto t1 = std::chrono::steady_clock::now();
    if (status != GGML_STATUS_SUCCESS) fail(std::string("graph compute failed: ") + ggml_status_to_string(status));
    ev["compute_ms"] = std::chrono::duration<double, std::milli>(t1 - t0).count();
    ev["n_splits"] = ggml_backend_sched_get_n_splits(sched);
    ev["n_copies"] = ggml_backend_sched_get_n_copies(sched);
    ev["refused_by_main"] = refused;

    std::map<const ggml_tensor *, std::string> operand = {
        {bases.q, "q"}, {bases.k, "k"}, {bases.v, "v"}, {bases.mask, "mask"}};
    json nodes = json::array();
    for (const ggml_tensor * t : ix.order) nodes.push_back(node_json(t, ix, B, sched, pinned, operand));
    ev["nodes"] = nodes;
    auto ids = [&](const std::vector<ggml_tensor *> & v_) {
        json a = json::array();
        for (auto * t : v_) a.push_back(ix.id.at(t));
        return a;
    };
    ev["roles"] = {{"q", ix.id.count(q) ? json(ix.id.at(q)) : json(nullptr)},
                   {"kq", ids(st.kq)}, {"kq_soft_max", ids(st.sm)}, {"kqv", ids(st.kqv)}, {"out", ix.id.at(st.out)}};
    bool fallback = false;
    for (const ggml_tensor * t : ix.order) {
        if (is_view_op(t->op)) continue;
        ggml_backend_t b = ggml_backend_sched_get_tensor_backend(sched, const_cast<ggml_tensor *>(t));
        if (b && b != B.main) fallback = true;
    }
    ev["fallback"] = fallback;
    if (!stage_path.empty()) {
        write_stages(stage_path, o, layout, fault, ggml_backend_name(B.main), st);
        ev["stages"] = stage_path;
    } else {
        ev["stages"] = nullptr;
    }
    ev["status"] = "ok";
    ggml_backend_sched_reset(sched);
    return ev;
}

struct Job {
    std::string input;
    std::vector<std::string> layouts;
    std::string fault = "none";
    std::string out_prefix;
    bool write_stages = true;
};

json run_job(const Backends & B, ggml_backend_sched_t sched, const Job & job) {
    json jr;
    jr["input"] = job.input;
    jr["fault"] = job.fault;
    json evs = json::array();
    try {
        Operands o = load_operands(job.input);
        // operand blobs live in one buffer of the chosen backend (as the KV cache would)
        ggml_init_params ip = {ggml_tensor_overhead() * 8, nullptr, true};
        std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(ip), ggml_free);
        Bases bases;
        auto mk = [&](const TensorDesc & td, const char * name) {
            const size_t ts = ggml_type_size(td.type);
            ggml_tensor * t = ggml_new_tensor_1d(ctx.get(), td.type, int64_t(td.blob_size / ts));
            ggml_set_name(t, name);
            return t;
        };
        bases.q = mk(o.q, "q_blob");
        bases.k = mk(o.k, "k_blob");
        bases.v = mk(o.v, "v_blob");
        bases.mask = mk(o.mask, "mask_blob");
        std::unique_ptr<ggml_backend_buffer, decltype(&ggml_backend_buffer_free)> buf(
            ggml_backend_alloc_ctx_tensors(ctx.get(), B.main), ggml_backend_buffer_free);
        if (!buf) fail("cannot allocate the operand buffer on " + std::string(ggml_backend_name(B.main)));
        auto put = [&](ggml_tensor * t, const TensorDesc & td) {
            ggml_backend_tensor_set(t, o.c.bytes.data() + o.c.data_start + td.blob_offset, 0, td.blob_size);
        };
        put(bases.q, o.q);
        put(bases.k, o.k);
        put(bases.v, o.v);
        put(bases.mask, o.mask);
        jr["shape"] = {{"d", o.d}, {"d_v", o.d_v}, {"n_q", o.n_q}, {"n_head", o.n_head}, {"n_head_kv", o.n_head_kv}, {"n_kv", o.n_kv}};
        for (const auto & layout : job.layouts) {
            json ev;
            try {
                std::string path;
                if (job.write_stages) path = job.out_prefix + "." + layout + (job.fault == "none" ? "" : "." + job.fault) + ".rsst";
                ev = evaluate(B, sched, o, bases, layout, job.fault, path);
            } catch (const std::exception & e) {
                ev = {{"layout", layout}, {"fault", job.fault}, {"status", "error"}, {"error", e.what()}};
                ggml_backend_sched_reset(sched);
            }
            evs.push_back(ev);
        }
        jr["status"] = "ok";
        for (const auto & ev : evs) {
            if (ev["status"] != "ok") jr["status"] = "error";
        }
    } catch (const std::exception & e) {
        jr["status"] = "error";
        jr["error"] = e.what();
    }
    jr["evaluations"] = evs;
    return jr;
}

json loaded_modules() {
    json arr = json::array();
    std::ifstream maps("/proc/self/maps");
    std::string line;
    std::map<std::string, bool> seen;
    while (std::getline(maps, line)) {
        auto pos = line.find('/');
        if (pos == std::string::npos) continue;
        std::string p = line.substr(pos);
        if (p.find("ggml") == std::string::npos && p.find("cuda") == std::string::npos && p.find("vulkan") == std::string::npos &&
            p.find("cublas") == std::string::npos) {
            continue;
        }
        if (!seen[p]) {
            seen[p] = true;
            arr.push_back(p);
        }
    }
    return arr;
}

std::vector<std::string> split_csv(const std::string & s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (!item.empty()) out.push_back(item);
    }
    return out;
}

std::string basename_noext(const std::string & p) {
    auto slash = p.find_last_of('/');
    std::string b = slash == std::string::npos ? p : p.substr(slash + 1);
    auto dot = b.find_last_of('.');
    return dot == std::string::npos ? b : b.substr(0, dot);
}

std::string dirname_of(const std::string & p) {
    auto slash = p.find_last_of('/');
    return slash == std::string::npos ? std::string(".") : p.substr(0, slash);
}

void usage(FILE * f) {
    std::fprintf(f,
                 "usage: refspec-replay [--backend NAME] [--threads N] [--layouts mq,pq,qb,qh] [--fault NAME]\n"
                 "                      [--out-dir DIR] [--jobs FILE] [--report FILE] [--no-stages]\n"
                 "                      [--backend-dir DIR] [--list-devices] [OPERAND_FILE ...]\n");
}

}  // namespace

int main(int argc, char ** argv) {
    std::string backend = "CPU", layouts_s = "mq,pq,qb,qh", fault = "none", out_dir, jobs_path, report_path, backend_dir;
    int threads = 1;
    bool list_devices = false, no_stages = false;
    std::vector<std::string> inputs;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto need = [&](const char * opt) -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "refspec-replay: %s needs a value\n", opt);
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--backend") backend = need("--backend");
        else if (a == "--threads") threads = std::atoi(need("--threads").c_str());
        else if (a == "--layouts") layouts_s = need("--layouts");
        else if (a == "--fault") fault = need("--fault");
        else if (a == "--out-dir") out_dir = need("--out-dir");
        else if (a == "--jobs") jobs_path = need("--jobs");
        else if (a == "--report") report_path = need("--report");
        else if (a == "--backend-dir") backend_dir = need("--backend-dir");
        else if (a == "--no-stages") no_stages = true;
        else if (a == "--list-devices") list_devices = true;
        else if (a == "-h" || a == "--help") { usage(stdout); return 0; }
        else if (!a.empty() && a[0] == '-') { std::fprintf(stderr, "refspec-replay: unknown option %s\n", a.c_str()); usage(stderr); return 2; }
        else inputs.push_back(a);
    }
    if (threads < 1) threads = 1;
    bool fault_ok = false;
    for (const auto & f : kFaults) fault_ok = fault_ok || f == fault;
    if (!fault_ok) { std::fprintf(stderr, "refspec-replay: unknown fault '%s'\n", fault.c_str()); return 2; }

    if (!backend_dir.empty()) ggml_backend_load_all_from_path(backend_dir.c_str());

    if (list_devices) {
        std::printf("%s\n", json({{"devices", devices_json()}}).dump(1).c_str());
        return 0;
    }

    std::vector<Job> jobs;
    try {
        if (!jobs_path.empty()) {
            std::ifstream f(jobs_path);
            if (!f) fail("cannot open jobs file " + jobs_path);
            json js = json::parse(f);
            for (const auto & j : js) {
                Job job;
                job.input = j.at("input").get<std::string>();
                job.layouts = j.contains("layouts") ? j.at("layouts").get<std::vector<std::string>>() : split_csv(layouts_s);
                job.fault = j.value("fault", std::string("none"));
                job.out_prefix = j.value("out_prefix", (out_dir.empty() ? dirname_of(job.input) : out_dir) + "/" + basename_noext(job.input));
                job.write_stages = j.value("write_stages", !no_stages);
                bool ok = false;
                for (const auto & f_ : kFaults) ok = ok || f_ == job.fault;
                if (!ok) fail("unknown fault '" + job.fault + "' in jobs file");
                jobs.push_back(job);
            }
        }
    } catch (const std::exception & e) {
        std::fprintf(stderr, "refspec-replay: %s\n", e.what());
        return 2;
    }
    for (const auto & in : inputs) {
        Job job;
        job.input = in;
        job.layouts = split_csv(layouts_s);
        job.fault = fault;
        job.out_prefix = (out_dir.empty() ? dirname_of(in) : out_dir) + "/" + basename_noext(in);
        job.write_stages = !no_stages;
        jobs.push_back(job);
    }
    if (jobs.empty()) {
        usage(stderr);
        return 2;
    }

    Backends B;
    try {
        B = init_backends(backend, threads);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "refspec-replay: %s\n", e.what());
        return 2;
    }
    ggml_backend_sched_t sched = ggml_backend_sched_new(B.list.data(), nullptr, int(B.list.size()), 1024, false, false);

    json report;
    report["tool"] = "refspec-replay";
    report["format_version"] = kFormatVersion;
    report["ggml_version"] = ggml_version();
    report["ggml_commit"] = ggml_commit();
    report["backend"] = {{"requested", backend},
                         {"device", ggml_backend_dev_name(B.main_dev)},
                         {"description", ggml_backend_dev_description(B.main_dev)},
                         {"type", dev_type_str(ggml_backend_dev_type(B.main_dev))},
                         {"name", ggml_backend_name(B.main)}};
    json sb = json::array();
    for (auto * b : B.list) sb.push_back(ggml_backend_name(b));
    report["sched_backends"] = sb;
    report["threads"] = threads;
    report["devices"] = devices_json();
    json jr = json::array();
    bool all_ok = true;
    for (const auto & job : jobs) {
        json r = run_job(B, sched, job);
        if (r["status"] != "ok") all_ok = false;
        jr.push_back(r);
    }
    report["jobs"] = jr;
    report["modules"] = loaded_modules();
    ggml_backend_sched_free(sched);
    if (B.cpu && B.cpu != B.main) ggml_backend_free(B.cpu);
    ggml_backend_free(B.main);

    const std::string text = report.dump();
    if (report_path.empty()) {
        std::printf("%s\n", text.c_str());
    } else {
        std::ofstream f(report_path + ".tmp");
        f << text << "\n";
        f.close();
        std::rename((report_path + ".tmp").c_str(), report_path.c_str());
    }
    return all_ok ? 0 : 1;
}
