// refspec-opreplay: replay single captured ggml operations (RMS_NORM, MUL, MUL_MAT) on fixed
// operands on one ggml backend and write their outputs, for the projection-operator replay of
// the state study (anc/state.md, "Projection replay").
//
// Input: a call file in the operand container of anc/operands.md with format "refspec-calls":
//   "calls": [{"id", "op", "op_params": [16 x int32], "src": [SRC, SRC]}]
//   SRC = {"tensor": NAME}                       an f32/f16 view stored in the file
//       | {"weight": GGUF_NAME, "buffer_type": B}  a tensor of the model file (--model), loaded
//                                                   with its own type (quantized bytes as stored)
//                                                   into buffer type B of the chosen device
// Each call is built as one node over views of the operands with the captured op_params,
// computed on the chosen backend alone (ggml_backend_graph_compute: no scheduler, no fallback;
// a node the backend does not support is that call's error) and its output written, f32
// contiguous, as tensor "<id>" of the output container (format "refspec-replayed").
//
// usage: refspec-opreplay --calls FILE --out FILE [--model GGUF] [--report FILE]
//                         [--backend NAME] [--threads N]
// exit status: 0 every call computed, 1 a call failed (the report says which), 2 usage error.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "gguf.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using json = nlohmann::ordered_json;

namespace {

constexpr char kMagic[8] = {'R', 'F', 'S', 'P', 'O', 'P', 'S', '1'};
constexpr size_t kAlign = 64;

struct OpError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string & msg) { throw OpError(msg); }

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

struct Container {
    json header;
    std::vector<uint8_t> bytes;
    size_t data_start = 0;
};

Container read_container(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open " + path);
    Container c;
    c.bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (c.bytes.size() < 16 || std::memcmp(c.bytes.data(), kMagic, 8) != 0) fail(path + ": bad magic");
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= uint64_t(c.bytes[8 + i]) << (8 * i);
    if (hlen > c.bytes.size() - 16) fail(path + ": truncated header");
    try {
        c.header = json::parse(c.bytes.begin() + 16, c.bytes.begin() + 16 + long(hlen));
    } catch (const std::exception & e) {
        fail(path + ": header is not valid JSON: " + e.what());
    }
    c.data_start = align_up(16 + hlen, kAlign);
    if (c.header.value("version", 0) != 1) fail(path + ": unsupported format version");
    if (c.header.value("format", "") != "refspec-calls") fail(path + ": not a call file (format)");
    return c;
}

void write_container(const std::string & path, const json & header, const std::vector<std::vector<uint8_t>> & blobs) {
    std::string h = header.dump();
    std::vector<uint8_t> out(16 + h.size());
    std::memcpy(out.data(), kMagic, 8);
    for (int i = 0; i < 8; i++) out[8 + i] = uint8_t(uint64_t(h.size()) >> (8 * i));
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

ggml_type parse_type(const std::string & s) {
    if (s == "f32") return GGML_TYPE_F32;
    if (s == "f16") return GGML_TYPE_F16;
    fail("unsupported tensor type '" + s + "' (f32 and f16 only)");
}

// One stored view: a blob tensor of the file in the backend buffer, viewed with ne/nb/offset.
struct Stored {
    ggml_tensor * blob = nullptr;
    ggml_type type = GGML_TYPE_F32;
    int64_t ne[4] = {1, 1, 1, 1};
    size_t nb[4] = {0, 0, 0, 0};
    size_t offset = 0;
    const uint8_t * bytes = nullptr;
    size_t size = 0;
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

ggml_backend_dev_t find_device(const std::string & name) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(name.c_str());
    if (!dev) {
        ggml_backend_reg_t reg = ggml_backend_reg_by_name(name.c_str());
        if (reg && ggml_backend_reg_dev_count(reg) > 0) dev = ggml_backend_reg_dev_get(reg, 0);
    }
    return dev;
}

// The buffer types a model's weights can live in on this device: its default, its extra
// (repacked) types and, off the CPU, the CPU's. A "<name>_Mapped" buffer (a memory-mapped
// model file) computes as its default type.
std::vector<ggml_backend_buffer_type_t> weight_bufts(ggml_backend_dev_t dev) {
    std::vector<ggml_backend_buffer_type_t> out;
    auto add = [&](ggml_backend_dev_t d) {
        out.push_back(ggml_backend_dev_buffer_type(d));
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(d);
        auto fn = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
            ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
        if (fn) {
            for (auto * b = fn(d); b && *b; b++) out.push_back(*b);
        }
    };
    add(dev);
    if (ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU) {
        if (auto * cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)) add(cpu);
    }
    return out;
}

ggml_backend_buffer_type_t pick_buft(const std::vector<ggml_backend_buffer_type_t> & bufts, std::string name) {
    const std::string mapped = "_Mapped";
    if (name.size() > mapped.size() && name.compare(name.size() - mapped.size(), mapped.size(), mapped) == 0) {
        name.resize(name.size() - mapped.size());
    }
    for (auto * b : bufts) {
        if (name == ggml_backend_buft_name(b)) return b;
    }
    return nullptr;
}

void usage(FILE * f) {
    std::fprintf(f,
                 "usage: refspec-opreplay --calls FILE --out FILE [--model GGUF] [--report FILE]\n"
                 "                        [--backend NAME] [--threads N]\n");
}

struct Options {
    std::string calls, out, model, report, backend = "CPU";
    int threads = 1;
};

json run(const Options & o, bool & all_ok) {
    Container c = read_container(o.calls);
    ggml_backend_dev_t dev = find_device(o.backend);
    if (!dev) fail("no ggml device or registry named '" + o.backend + "'");
    ggml_backend_t backend = ggml_backend_dev_init(dev, nullptr);
    if (!backend) fail("cannot initialise backend '" + o.backend + "'");
    {
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
        auto fn = reinterpret_cast<ggml_backend_set_n_threads_t>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads"));
        if (fn) fn(backend, o.threads);
    }
    json rep;
    rep["backend"] = {{"requested", o.backend},
                      {"device", ggml_backend_dev_name(dev)},
                      {"description", ggml_backend_dev_description(dev)},
                      {"type", dev_type_str(ggml_backend_dev_type(dev))}};
    rep["threads"] = o.threads;
    rep["calls_file"] = o.calls;

    const json & calls = c.header.at("calls");
    const json & tensors = c.header.value("tensors", json::object());

    // stored tensors: one context, one buffer of the device
    std::map<std::string, Stored> stored;
    size_t n_stored = tensors.size() + 1;
    ggml_init_params sp = {ggml_tensor_overhead() * n_stored, nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> sctx(ggml_init(sp), ggml_free);
    for (auto it = tensors.begin(); it != tensors.end(); ++it) {
        const json & t = it.value();
        Stored s;
        s.type = parse_type(t.at("type").get<std::string>());
        for (int i = 0; i < 4; i++) {
            s.ne[i] = t.at("ne")[i].get<int64_t>();
            s.nb[i] = t.at("nb")[i].get<size_t>();
        }
        s.offset = t.at("offset").get<size_t>();
        size_t boff = t.at("blob").at("offset").get<size_t>();
        s.size = t.at("blob").at("size").get<size_t>();
        const size_t esz = ggml_type_size(s.type);
        if (s.nb[0] != esz || s.size % esz || s.offset % esz) fail("tensor '" + it.key() + "': bad element layout");
        size_t last = s.offset + esz;
        for (int i = 0; i < 4; i++) last += size_t(s.ne[i] - 1) * s.nb[i];
        if (last > s.size) fail("tensor '" + it.key() + "': view reaches past its blob");
        if (c.data_start + boff + s.size > c.bytes.size()) fail("tensor '" + it.key() + "': blob is truncated");
        s.bytes = c.bytes.data() + c.data_start + boff;
        s.blob = ggml_new_tensor_1d(sctx.get(), s.type, int64_t(s.size / esz));
        ggml_set_name(s.blob, it.key().c_str());
        stored[it.key()] = s;
    }
    std::unique_ptr<ggml_backend_buffer, decltype(&ggml_backend_buffer_free)> sbuf(nullptr, ggml_backend_buffer_free);
    if (!stored.empty()) {
        sbuf.reset(ggml_backend_alloc_ctx_tensors(sctx.get(), backend));
        if (!sbuf) fail("cannot allocate the operand buffer on " + o.backend);
        for (auto & kv : stored) ggml_backend_tensor_set(kv.second.blob, kv.second.bytes, 0, kv.second.size);
    }

    // weights: the model file's tensors the calls name, each in the buffer type it had in the model
    std::map<std::string, std::string> weight_buft;  // name -> buffer type
    for (const auto & call : calls) {
        for (const auto & s : call.at("src")) {
            if (s.contains("weight")) weight_buft[s.at("weight").get<std::string>()] = s.value("buffer_type", std::string());
        }
    }
    std::map<std::string, ggml_tensor *> weights;
    std::vector<std::unique_ptr<ggml_context, decltype(&ggml_free)>> wctxs;
    std::vector<std::unique_ptr<ggml_backend_buffer, decltype(&ggml_backend_buffer_free)>> wbufs;
    json wrep = json::array();
    if (!weight_buft.empty()) {
        if (o.model.empty()) fail("the calls name model weights: --model is required");
        ggml_context * meta = nullptr;
        gguf_init_params gp = {true, &meta};
        std::unique_ptr<gguf_context, decltype(&gguf_free)> gctx(gguf_init_from_file(o.model.c_str(), gp), gguf_free);
        if (!gctx) fail("cannot read the GGUF " + o.model);
        std::unique_ptr<ggml_context, decltype(&ggml_free)> meta_owner(meta, ggml_free);
        auto bufts = weight_bufts(dev);
        std::FILE * f = std::fopen(o.model.c_str(), "rb");
        if (!f) fail("cannot open " + o.model);
        std::unique_ptr<std::FILE, decltype(&std::fclose)> fown(f, std::fclose);
        for (const auto & kv : weight_buft) {
            int64_t id = gguf_find_tensor(gctx.get(), kv.first.c_str());
            if (id < 0) fail("the GGUF has no tensor '" + kv.first + "'");
            ggml_backend_buffer_type_t buft = pick_buft(bufts, kv.second);
            if (!buft) fail("weight '" + kv.first + "': buffer type '" + kv.second + "' is not available on " + o.backend);
            ggml_init_params wp = {ggml_tensor_overhead(), nullptr, true};
            wctxs.emplace_back(ggml_init(wp), ggml_free);
            ggml_tensor * w = ggml_dup_tensor(wctxs.back().get(), ggml_get_tensor(meta, kv.first.c_str()));
            ggml_set_name(w, kv.first.c_str());
            wbufs.emplace_back(ggml_backend_alloc_ctx_tensors_from_buft(wctxs.back().get(), buft), ggml_backend_buffer_free);
            if (!wbufs.back()) fail("cannot allocate weight '" + kv.first + "' in " + ggml_backend_buft_name(buft));
            ggml_backend_buffer_set_usage(wbufs.back().get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
            const size_t size = gguf_get_tensor_size(gctx.get(), id);
            std::vector<uint8_t> data(size);
            const size_t off = gguf_get_data_offset(gctx.get()) + gguf_get_tensor_offset(gctx.get(), id);
            if (std::fseek(f, long(off), SEEK_SET) != 0 || std::fread(data.data(), 1, size, f) != size) {
                fail("cannot read weight '" + kv.first + "' from " + o.model);
            }
            if (size != ggml_nbytes(w)) fail("weight '" + kv.first + "': GGUF size differs from its shape");
            ggml_backend_tensor_set(w, data.data(), 0, size);
            weights[kv.first] = w;
            wrep.push_back({{"name", kv.first},
                            {"type", ggml_type_name(w->type)},
                            {"ne", {w->ne[0], w->ne[1], w->ne[2], w->ne[3]}},
                            {"bytes", size},
                            {"buffer_type", ggml_backend_buft_name(buft)}});
        }
    }
    rep["weights"] = wrep;

    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
    std::unique_ptr<ggml_gallocr, decltype(&ggml_gallocr_free)> gown(galloc, ggml_gallocr_free);
    json out_tensors = json::object();
    std::vector<std::vector<uint8_t>> out_blobs;
    size_t out_off = 0;
    json results = json::array();
    for (const auto & call : calls) {
        json r;
        const std::string id = call.at("id").get<std::string>();
        const std::string op = call.at("op").get<std::string>();
        r["id"] = id;
        r["op"] = op;
        try {
            ggml_init_params cp = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
            std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(cp), ggml_free);
            std::vector<ggml_tensor *> src;
            for (const auto & s : call.at("src")) {
                if (s.contains("weight")) {
                    src.push_back(weights.at(s.at("weight").get<std::string>()));
                } else {
                    const std::string name = s.at("tensor").get<std::string>();
                    auto it = stored.find(name);
                    if (it == stored.end()) fail("call " + id + ": no tensor '" + name + "'");
                    const Stored & st = it->second;
                    src.push_back(ggml_view_4d(ctx.get(), st.blob, st.ne[0], st.ne[1], st.ne[2], st.ne[3], st.nb[1], st.nb[2],
                                               st.nb[3], st.offset));
                }
            }
            ggml_tensor * node = nullptr;
            if (op == "RMS_NORM" && src.size() == 1) {
                node = ggml_rms_norm(ctx.get(), src[0], 0.0f);
            } else if (op == "MUL" && src.size() == 2) {
                node = ggml_mul(ctx.get(), src[0], src[1]);
            } else if (op == "MUL_MAT" && src.size() == 2) {
                node = ggml_mul_mat(ctx.get(), src[0], src[1]);
            } else {
                fail("call " + id + ": unsupported op " + op + " with " + std::to_string(src.size()) + " sources");
            }
            const json & params = call.at("op_params");
            if (params.size() > GGML_MAX_OP_PARAMS / sizeof(int32_t)) fail("call " + id + ": too many op_params");
            for (size_t i = 0; i < params.size(); i++) {
                const int32_t v = params[i].get<int32_t>();
                std::memcpy(reinterpret_cast<char *>(node->op_params) + i * sizeof(int32_t), &v, sizeof(v));
            }
            ggml_set_output(node);
            ggml_set_name(node, id.c_str());
            r["type"] = ggml_type_name(node->type);
            r["ne"] = {node->ne[0], node->ne[1], node->ne[2], node->ne[3]};
            r["supports_op"] = ggml_backend_supports_op(backend, node);
            if (!r["supports_op"].get<bool>()) fail("call " + id + ": " + o.backend + " does not support this " + op);
            ggml_cgraph * gf = ggml_new_graph_custom(ctx.get(), 8, false);
            ggml_build_forward_expand(gf, node);
            if (!ggml_gallocr_alloc_graph(galloc, gf)) fail("call " + id + ": graph allocation failed");
            auto t0 = std::chrono::steady_clock::now();
            if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) fail("call " + id + ": compute failed");
            r["compute_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (node->type != GGML_TYPE_F32 || !ggml_is_contiguous(node)) fail("call " + id + ": output is not contiguous f32");
            std::vector<uint8_t> bytes(ggml_nbytes(node));
            ggml_backend_tensor_get(node, bytes.data(), 0, bytes.size());
            const size_t esz = sizeof(float);
            out_tensors[id] = {{"type", "f32"},
                               {"ne", {node->ne[0], node->ne[1], node->ne[2], node->ne[3]}},
                               {"nb", {esz, esz * node->ne[0], esz * node->ne[0] * node->ne[1], esz * node->ne[0] * node->ne[1] * node->ne[2]}},
                               {"offset", 0},
                               {"blob", {{"offset", out_off}, {"size", bytes.size()}}}};
            out_off = align_up(out_off + bytes.size(), kAlign);
            out_blobs.push_back(std::move(bytes));
            r["status"] = "ok";
        } catch (const std::exception & e) {
            r["status"] = "error";
            r["error"] = e.what();
            all_ok = false;
        }
        results.push_back(r);
    }
    json oh = {{"format", "refspec-replayed"},
               {"version", 1},
               {"backend", rep["backend"]},
               {"source", o.calls},
               {"tensors", out_tensors}};
    write_container(o.out, oh, out_blobs);
    rep["calls"] = results;
    ggml_backend_free(backend);
    return rep;
}

}  // namespace

int main(int argc, char ** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto need = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage(stderr);
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--calls") o.calls = need();
        else if (a == "--out") o.out = need();
        else if (a == "--model") o.model = need();
        else if (a == "--report") o.report = need();
        else if (a == "--backend") o.backend = need();
        else if (a == "--threads") o.threads = std::stoi(need());
        else if (a == "-h" || a == "--help") {
            usage(stdout);
            return 0;
        } else {
            std::fprintf(stderr, "refspec-opreplay: unknown option %s\n", a.c_str());
            usage(stderr);
            return 2;
        }
    }
    if (o.calls.empty() || o.out.empty()) {
        usage(stderr);
        return 2;
    }
    bool all_ok = true;
    json rep;
    try {
        rep = run(o, all_ok);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "refspec-opreplay: %s\n", e.what());
        return 1;
    }
    const std::string text = rep.dump(1);
    if (o.report.empty()) {
        std::printf("%s\n", text.c_str());
    } else {
        std::ofstream f(o.report);
        f << text << "\n";
        if (!f) {
            std::fprintf(stderr, "refspec-opreplay: cannot write %s\n", o.report.c_str());
            return 1;
        }
    }
    return all_ok ? 0 : 1;
}
