// C++ launcher of a package promoted by evo: picks the kernel for (head dim, dtype, causal,
// bucket of max(Lq, Lk)) within the limits promote verified (B * Hq, Hq / Hkv, uneven lengths and
// the causal alignment), loads its cubin on each device with the CUDA driver API, and launches it
// with cuLaunchKernel on torch's current stream (kernel ABI v2: q, o (B, Hq, Lq, D), k, v
// (B, Hkv, Lk, D), causal mask j <= i + shift), and its split-KV variant (docs/kernel-abi.md): the
// grid, split length and workspace of _splitkv.launch_numbers (evo's own split-plan module, copied
// into the package), the workspace taken from torch's caching allocator for each launch, its counters
// zeroed on the stream before it. A TMA kernel may take a tile counter (docs/kernel-abi.md, "The TMA
// variant"): one zeroed device word per (device, stream), allocated at the first launch on that
// stream that needs it and held for the life of the process. No host sync and no allocation outside
// torch's caching allocator, so calls can be captured in a CUDA graph once the kernels are loaded. A
// split-KV kernel may also export per-sequence-length and paged entries (NAME_lens, NAME_paged:
// docs/kernel-abi.md, "Ragged and paged caches"), which run_cache() launches for calls that pass
// seqlens (and a block table), through the routes of that layout alone.
//
// Python hands over the dispatch table once (configure); afterwards run() answers a call in a few
// microseconds of host time, or returns None when the kernels do not cover it (the caller then
// uses SDPA). The driver is reached through dlopen("libcuda.so.1"), so nothing links -lcuda.
#include <torch/extension.h>

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <dlfcn.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace {

constexpr int64_t kMaxGridY = 65535;                       // grid.y = B * Hq
constexpr int64_t kMaxElements = std::numeric_limits<int32_t>::max();  // the ABI indexes with int
constexpr uintptr_t kAlignment = 16;                       // kernels use 16-byte vector loads

// ---- the driver entry points, resolved once --------------------------------------------------
struct Driver {
  decltype(&::cuGetErrorString) get_error_string;
  decltype(&::cuDeviceGet) device_get;
  decltype(&::cuDeviceGetAttribute) device_get_attribute;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain;
  decltype(&::cuCtxGetCurrent) ctx_get_current;
  decltype(&::cuCtxPushCurrent) ctx_push_current;
  decltype(&::cuCtxPopCurrent) ctx_pop_current;
  decltype(&::cuStreamIsCapturing) stream_is_capturing;
  decltype(&::cuModuleLoadData) module_load_data;
  decltype(&::cuModuleGetFunction) module_get_function;
  decltype(&::cuFuncSetAttribute) func_set_attribute;
  decltype(&::cuLaunchKernel) launch_kernel;
  decltype(&::cuTensorMapEncodeTiled) encode_tiled;
};

template <typename F>
void resolve(void* lib, const char* name, F& out) {
  void* p = dlsym(lib, name);
  TORCH_CHECK(p != nullptr, "libcuda.so.1 has no ", name, " (driver too old?)");
  out = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static const Driver d = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(lib != nullptr, "cannot open libcuda.so.1: ", dlerror());
    Driver r{};
    resolve(lib, "cuGetErrorString", r.get_error_string);
    resolve(lib, "cuDeviceGet", r.device_get);
    resolve(lib, "cuDeviceGetAttribute", r.device_get_attribute);
    resolve(lib, "cuDevicePrimaryCtxRetain", r.primary_ctx_retain);
    resolve(lib, "cuCtxGetCurrent", r.ctx_get_current);
    resolve(lib, "cuCtxPushCurrent_v2", r.ctx_push_current);
    resolve(lib, "cuCtxPopCurrent_v2", r.ctx_pop_current);
    resolve(lib, "cuStreamIsCapturing", r.stream_is_capturing);
    resolve(lib, "cuModuleLoadData", r.module_load_data);
    resolve(lib, "cuModuleGetFunction", r.module_get_function);
    resolve(lib, "cuFuncSetAttribute", r.func_set_attribute);
    resolve(lib, "cuLaunchKernel", r.launch_kernel);
    resolve(lib, "cuTensorMapEncodeTiled", r.encode_tiled);
    return r;
  }();
  return d;
}

[[noreturn]] void fail(CUresult result, const std::string& what) {
  const char* message = nullptr;
  driver().get_error_string(result, &message);
  TORCH_CHECK(false, what, " failed: ", message ? message : "unknown CUDA error", " (", int(result), ")");
}

// Builds no message unless the call failed (run() is on the hot path).
inline void check(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) fail(result, what);
}

// ---- the dispatch table (set once by configure) ----------------------------------------------
struct Kernel {
  int image;           // index into g_images (one cubin per candidate)
  std::string entry;   // extern "C" name, evo_attn_d{D}_{dtype}_{causal|full}
  int threads;
  int rows_per_cta;
  int smem_bytes;
  bool tma;            // TMA ABI: tensor maps of q, k, v, o come first (docs/kernel-abi.md)
  std::vector<int> tma_rows;  // box rows of those four tensor maps
  bool persistent;     // grid = min(tiles, SMs) x 1 x 1
  int head_dim;
  std::vector<int> split;  // split-KV ABI: key_tile, split_min, waves, ragged_splits (empty: another ABI)
  bool lens = false;       // it also exports NAME_lens (per-sequence lengths)
  bool paged = false;      // ... and NAME_paged (a paged cache)
  bool tile_counter = false;  // TMA ABI: the stream's tile counter word follows the scale
};

// (layout, head_dim, dtype, causal, max(Lq, Lk) <= max_len) -> kernel, serving B*Hq <= max_bh, Hq/Hkv <=
// max_group, and Lq != Lk only when cross and (causal) at an alignment promote verified;
// kernel < 0: SDPA. A call with seqlens (and a block table) takes only the routes of its layout, whose
// kernel runs its NAME_lens (NAME_paged) entry, Lk its capacity. The package's _routes.py states the
// same rule for explain().
enum Layout { kContiguous = 0, kLens = 1, kPaged = 2 };

struct Route {
  int64_t head_dim;
  at::ScalarType dtype;
  bool causal;
  int64_t max_len;
  int64_t max_bh;
  int64_t max_group;
  bool cross;
  bool top_left;       // a causal mask aligned at the top left (shift 0) with Lq != Lk
  bool bottom_right;   // ... at the bottom right (shift Lk - Lq)
  int64_t max_lq;      // a decode or chunk route: the most query rows it serves (0: any)
  int kernel;
  int layout;          // Layout: the calls it serves
  int64_t min_len;     // the shortest max(Lq, Lk) it serves (a chunk route's starts above its max_lq)
};

struct DeviceState {
  std::atomic<int> arch{-1};        // -1 not asked yet, 0 the cubins do not run here, 1 they do
  std::atomic<bool> loaded{false};
  std::mutex mutex;                 // guards loading
  CUcontext context = nullptr;      // the device's primary context (torch's)
  std::vector<CUfunction> functions;
  std::vector<CUfunction> lens_functions, paged_functions;  // per kernel, nullptr where it has none
  int sms = 0;                      // multiprocessors, for persistent grids and split plans
  std::mutex counters_mutex;        // guards tile_counters
  std::unordered_map<CUstream, void*> tile_counters;  // per stream: its tile counter word (never freed)
};

std::string g_package;
std::vector<std::string> g_images;
std::vector<Kernel> g_kernels;
std::vector<Route> g_routes;
int g_major = -1, g_minor = -1;
std::vector<std::unique_ptr<DeviceState>> g_devices;
std::once_flag g_configured;
py::object* g_planner = nullptr;  // _splitkv.launch_numbers; leaked, so never destroyed after Python is

at::ScalarType dtype_of(const std::string& name) {
  if (name == "fp16") return at::kHalf;
  if (name == "bf16") return at::kBFloat16;
  TORCH_CHECK(false, "unknown dtype ", name);
}

bool arch_ok(DeviceState& st, int device) {
  int known = st.arch.load(std::memory_order_relaxed);
  if (known < 0) {
    const Driver& d = driver();
    CUdevice dev;
    int major = -1, minor = -1;
    check(d.device_get(&dev, device), "cuDeviceGet");
    check(d.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
    check(d.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
    int unknown = -1;  // a concurrent load failure may have marked the device unusable meanwhile
    if (!st.arch.compare_exchange_strong(unknown, major == g_major && minor == g_minor ? 1 : 0))
      return unknown == 1;
    known = st.arch.load(std::memory_order_relaxed);
  }
  return known == 1;
}

// Load every cubin into the device's primary context and look up every kernel.
void load_modules(DeviceState& st, int device) {
  const Driver& d = driver();
  CUdevice dev;
  check(d.device_get(&dev, device), "cuDeviceGet");
  check(d.primary_ctx_retain(&st.context, dev), "cuDevicePrimaryCtxRetain");
  check(d.ctx_push_current(st.context), "cuCtxPushCurrent");
  std::vector<CUmodule> modules(g_images.size());
  std::vector<CUfunction> functions(g_kernels.size());
  std::vector<CUfunction> lens(g_kernels.size(), nullptr), paged(g_kernels.size(), nullptr);
  // Looks up one function and raises its shared memory limit above the 48 KB default where needed;
  // that also makes the driver load it now (with lazy loading it would otherwise load at a first
  // launch, maybe captured).
  auto function = [&](CUfunction* out, const Kernel& k, const std::string& name) {
    CUresult r = d.module_get_function(out, modules[k.image], name.c_str());
    if (r != CUDA_SUCCESS) fail(r, "cuModuleGetFunction(" + name + ")");
    r = d.func_set_attribute(*out, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k.smem_bytes);
    if (r != CUDA_SUCCESS) fail(r, "cuFuncSetAttribute(" + name + ", MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  };
  try {
    for (size_t i = 0; i < g_images.size(); ++i)
      check(d.module_load_data(&modules[i], g_images[i].data()), "cuModuleLoadData");
    for (size_t i = 0; i < g_kernels.size(); ++i) {
      const Kernel& k = g_kernels[i];
      function(&functions[i], k, k.entry);
      if (k.lens) function(&lens[i], k, k.entry + "_lens");
      if (k.paged) function(&paged[i], k, k.entry + "_paged");
    }
  } catch (...) {
    CUcontext popped;
    d.ctx_pop_current(&popped);
    throw;
  }
  CUcontext popped;
  check(d.ctx_pop_current(&popped), "cuCtxPopCurrent");
  check(d.device_get_attribute(&st.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
  st.functions = std::move(functions);
  st.lens_functions = std::move(lens);
  st.paged_functions = std::move(paged);
}

// The 3-D tensor map of a contiguous (B, H, L, D) tensor with its own shape (q, o: (D, Lq, B*Hq);
// k, v: (D, Lk, B*Hkv)), boxes of 64 columns x `rows` rows, 128-byte swizzle, zeros out of bounds
// (as evo/gpu/tma.py encodes it).
CUtensorMap tensor_map(const at::Tensor& t, int rows) {
  CUtensorMap map;
  const cuuint64_t B = t.size(0), H = t.size(1), L = t.size(2), D = t.size(3);
  const cuuint64_t dims[3] = {D, L, B * H};
  const cuuint64_t strides[2] = {D * 2, L * D * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(rows), 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUtensorMapDataType dt = t.scalar_type() == at::kHalf ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  check(driver().encode_tiled(&map, dt, 3, t.data_ptr(), dims, strides, box, unit,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
  return map;
}

// One split-KV launch: _splitkv.launch_numbers of the kernel's split config and the problem
// (ragged: a lens or paged cache, Lk its capacity).
struct SplitLaunch {
  unsigned grid_x, grid_y;
  int split_len;
  int64_t workspace_bytes, counter_bytes;
};

SplitLaunch split_launch(const Kernel& kern, int B, int Hq, int Hkv, int Lq, int Lk, int sms, bool ragged) {
  const py::tuple t = (*g_planner)(kern.split[0], kern.split[1], kern.split[2], kern.split[3], kern.rows_per_cta,
                                   kern.head_dim, B, Hq, Hkv, Lq, Lk, sms, ragged);
  return {t[0].cast<unsigned>(), t[1].cast<unsigned>(), t[2].cast<int>(), t[3].cast<int64_t>(),
          t[4].cast<int64_t>()};
}

// Whether the kernels are loaded on the device, loading them on first use. Loading is not a
// stream operation, so it is refused while the current stream is being captured. A device where
// loading fails (say, a driver too old for the cubins) is marked unusable: SDPA serves it.
bool ensure_loaded(DeviceState& st, int device) {
  if (st.loaded.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(st.mutex);
  if (st.loaded.load(std::memory_order_acquire)) return true;
  if (st.arch.load(std::memory_order_relaxed) == 0) return false;
  CUstream stream = c10::cuda::getCurrentCUDAStream(device).stream();
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  check(driver().stream_is_capturing(stream, &capture), "cuStreamIsCapturing");
  TORCH_CHECK(capture == CU_STREAM_CAPTURE_STATUS_NONE, g_package,
              ": the kernels are loaded on first use, which cannot happen during CUDA graph capture; "
              "call ", g_package, ".prepare() (or run one call) before capturing");
  try {
    load_modules(st, device);
  } catch (const c10::Error& e) {
    st.arch.store(0, std::memory_order_relaxed);
    TORCH_WARN(g_package, ": cannot load the kernels on cuda:", device,
               ", so SDPA serves every call there: ", e.what_without_backtrace());
    return false;
  }
  st.loaded.store(true, std::memory_order_release);
  return true;
}

DeviceState* state(int device) {
  if (device < 0 || device >= static_cast<int>(g_devices.size())) return nullptr;
  return g_devices[device].get();
}

bool aligned(const at::Tensor& t) {
  // A non-contiguous tensor is copied into a fresh (aligned) buffer before the launch.
  return !t.is_contiguous() || reinterpret_cast<uintptr_t>(t.data_ptr()) % kAlignment == 0;
}

// Whether q (B, Hq, Lq, D), k and v (B, Hkv, Lk, D) are a problem the kernel ABI takes: 4-D, k and
// v alike with q's batch and head dim, Hq a multiple of Hkv, within the grid and 32-bit indexing.
bool abi_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (q.dim() != 4 || k.dim() != 4 || v.sizes() != k.sizes()) return false;   // Dv == D
  const int64_t B = q.size(0), Hq = q.size(1), Lq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Lk = k.size(2);
  if (k.size(0) != B || k.size(3) != D) return false;
  if (B < 1 || Hq < 1 || Lq < 1 || Hkv < 1 || Lk < 1 || Hq % Hkv != 0) return false;
  return B * Hq <= kMaxGridY && q.numel() <= kMaxElements && k.numel() <= kMaxElements;
}

// Whether a route serves the call beyond its bucket: the heads, the group and uneven lengths.
bool within(const Route& r, int64_t bh, int64_t group, bool uneven, bool causal, bool bottom_right) {
  if (r.kernel < 0 || bh > r.max_bh || group > r.max_group) return false;   // past what promote verified
  if (!uneven) return true;
  return r.cross && (!causal || (bottom_right ? r.bottom_right : r.top_left));
}

// The kernel of the route of `layout` for q's head dim, dtype and query rows on Lk keys (B sequences, Hkv
// key/value heads), or -1 when none serves it or the kernels do not run on q's device.
int route_kernel(const at::Tensor& q, int64_t B, int64_t Hkv, int64_t Lk, bool causal, bool bottom_right,
                 int layout) {
  const int64_t Hq = q.size(1), Lq = q.size(2), D = q.size(3);
  const int64_t length = std::max(Lq, Lk);
  for (const Route& r : g_routes) {
    if (r.layout == layout && r.head_dim == D && r.dtype == q.scalar_type() && r.causal == causal &&
        (r.max_lq == 0 || Lq <= r.max_lq) && r.min_len <= length && length <= r.max_len) {
      if (!within(r, B * Hq, Hq / Hkv, Lq != Lk, causal, bottom_right)) return -1;
      DeviceState* st = state(q.get_device());
      return st != nullptr && arch_ok(*st, q.get_device()) ? r.kernel : -1;
    }
  }
  return -1;
}

// The kernel that serves this call, or -1 when SDPA has to.
int pick(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, bool bottom_right) {
  if (g_kernels.empty() || !q.is_cuda() || !abi_shapes(q, k, v)) return -1;
  const at::ScalarType dt = q.scalar_type();
  if ((dt != at::kHalf && dt != at::kBFloat16) || k.scalar_type() != dt || v.scalar_type() != dt)
    return -1;
  if (k.device() != q.device() || v.device() != q.device()) return -1;
  if (at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()))
    return -1;                                                       // forward only: SDPA has autograd
  if (!aligned(q) || !aligned(k) || !aligned(v)) return -1;
  return route_kernel(q, q.size(0), k.size(1), k.size(2), causal, bottom_right, kContiguous);
}

// Whether t is a contiguous int32 tensor on q's device of `dims` dimensions, the first q's batch.
bool index_tensor(const at::Tensor& t, const at::Tensor& q, int64_t dims) {
  return t.is_cuda() && t.device() == q.device() && t.scalar_type() == at::kInt && t.is_contiguous() &&
         t.dim() == dims && t.size(0) == q.size(0) && t.numel() >= 1;
}

// The kernel that serves a call with per-sequence lengths (seqlens) and, paged, a block table, or -1:
// the route of that layout for its capacity (Lk, or pages_per_seq x page_size) with the mask at the
// bottom right of each sequence (configure checked that its kernel exports the layout). k and v: (B,
// Hkv, Lk, D), or the pool (pages, Hkv, page_size, D). The lengths stay on the device: each must be
// within the capacity.
int pick_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, const at::Tensor& seqlens,
               const std::optional<at::Tensor>& block_table) {
  if (g_kernels.empty() || !q.is_cuda() || q.dim() != 4 || k.dim() != 4 || v.sizes() != k.sizes()) return -1;
  const at::ScalarType dt = q.scalar_type();
  if ((dt != at::kHalf && dt != at::kBFloat16) || k.scalar_type() != dt || v.scalar_type() != dt) return -1;
  if (k.device() != q.device() || v.device() != q.device() || !index_tensor(seqlens, q, 1)) return -1;
  if (block_table && !index_tensor(*block_table, q, 2)) return -1;
  if (at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad())) return -1;
  if (!aligned(q) || !aligned(k) || !aligned(v)) return -1;
  const int64_t B = q.size(0), Hq = q.size(1), Lq = q.size(2), D = q.size(3), Hkv = k.size(1);
  if (k.size(3) != D || (!block_table && k.size(0) != B)) return -1;
  if (B < 1 || Hq < 1 || Lq < 1 || Hkv < 1 || k.size(2) < 1 || Hq % Hkv != 0) return -1;
  if (B * Hq > kMaxGridY || q.numel() > kMaxElements || k.numel() > kMaxElements) return -1;
  const int64_t Lk = block_table ? block_table->size(1) * k.size(2) : k.size(2);
  if (Lk > kMaxElements) return -1;
  return route_kernel(q, B, Hkv, Lk, causal, true, block_table ? kPaged : kLens);
}

// ---- the Python-facing functions -------------------------------------------------------------

// images: cubin bytes; kernels: (image, entry, threads, rows_per_cta, smem_bytes, tma, tma_rows,
// persistent, head_dim, split, layouts, tile_counter);
// routes: (head_dim, dtype, causal, max_len, max_bh, max_group, cross, aligns, max_lq, kernel, layout,
// min_len), the decode routes first, then the chunk routes, then the others, each kind in increasing
// max_len per key (_routes.ordered); a call takes the first route whose rows and min_len..max_len hold it; past
// the last max_len of a key, and past any other limit of a route, SDPA serves the call (promote
// verified no further); layout "contiguous", "lens" or "paged"; planner: _splitkv.launch_numbers.
using KernelArgs = std::tuple<int, std::string, int, int, int, bool, std::vector<int>, bool, int, std::vector<int>,
                              std::vector<std::string>, bool>;
using RouteArgs = std::tuple<int64_t, std::string, bool, int64_t, int64_t, int64_t, bool,
                             std::vector<std::string>, int64_t, int, std::string, int64_t>;

void configure(const std::string& package, const std::vector<py::bytes>& images,
               const std::vector<KernelArgs>& kernels, const std::vector<RouteArgs>& routes, int arch_major,
               int arch_minor, const py::function& planner) {
  bool first = false;
  std::call_once(g_configured, [&] {
    first = true;
    g_package = package;
    for (const py::bytes& b : images) g_images.emplace_back(b);
    for (const auto& [image, entry, threads, rows, smem, tma, tma_rows, persistent, head_dim, split, layouts,
                      tile_counter] : kernels) {
      TORCH_CHECK(image >= 0 && image < static_cast<int>(g_images.size()), "bad image index");
      TORCH_CHECK(threads > 0 && rows > 0 && smem >= 0, "bad launch config for ", entry);
      TORCH_CHECK(!tma || (tma_rows.size() == 4 && *std::min_element(tma_rows.begin(), tma_rows.end()) > 0),
                  "bad tensor-map box rows for ", entry);
      TORCH_CHECK(split.empty() || (split.size() == 4 && *std::min_element(split.begin(), split.end()) > 0 &&
                                    head_dim > 0 && !tma && !persistent),
                  "bad split-KV launch config for ", entry);
      const bool lens = std::count(layouts.begin(), layouts.end(), "lens") > 0;
      const bool paged = std::count(layouts.begin(), layouts.end(), "paged") > 0;
      TORCH_CHECK(!(lens || paged) || !split.empty(), "only a split-KV kernel has cache layouts: ", entry);
      TORCH_CHECK(!tile_counter || tma, "only a TMA kernel takes a tile counter: ", entry);
      g_kernels.push_back({image, entry, threads, rows, smem, tma, tma_rows, persistent, head_dim, split, lens,
                           paged, tile_counter});
    }
    for (const auto& [head_dim, dtype, causal, max_len, max_bh, max_group, cross, aligns, max_lq, kernel, layout_name,
                      min_len] : routes) {
      TORCH_CHECK(kernel < static_cast<int>(g_kernels.size()), "bad kernel index");
      TORCH_CHECK(layout_name == "contiguous" || layout_name == "lens" || layout_name == "paged",
                  "unknown cache layout ", layout_name);
      const int layout = layout_name == "lens" ? kLens : layout_name == "paged" ? kPaged : kContiguous;
      TORCH_CHECK(kernel < 0 || layout == kContiguous ||
                  (layout == kLens ? g_kernels[kernel].lens : g_kernels[kernel].paged),
                  "a ", layout_name, " route's kernel must export its ", layout_name, " entry");
      TORCH_CHECK(max_len >= 1 && max_bh >= 1 && max_group >= 1, "a route needs finite length, heads and group limits");
      TORCH_CHECK(max_lq >= 0, "a route's max_lq is 0 (any) or the most query rows it serves");
      bool top_left = false, bottom_right = false;
      for (const std::string& a : aligns) {
        TORCH_CHECK(a == "top_left" || a == "bottom_right", "unknown causal alignment ", a);
        (a == "top_left" ? top_left : bottom_right) = true;
      }
      g_routes.push_back({head_dim, dtype_of(dtype), causal, max_len, max_bh, max_group, cross, top_left,
                          bottom_right, max_lq, kernel, layout, min_len});
    }
    g_planner = new py::object(planner);
    g_major = arch_major;
    g_minor = arch_minor;
    const int n = c10::cuda::device_count();
    for (int i = 0; i < n; ++i) g_devices.push_back(std::make_unique<DeviceState>());
  });
  TORCH_CHECK(first, "configure() may be called once");
}

bool supports(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, bool bottom_right) {
  return pick(q, k, v, causal, bottom_right) >= 0;
}

// Whether the kernels run on this device; loads them there when they do.
bool prepare(int device) {
  DeviceState* st = state(device);
  if (st == nullptr || g_kernels.empty() || !arch_ok(*st, device)) return false;
  return ensure_loaded(*st, device);
}

// Launches `function` of `kern` on `stream` in the device's context (pushed where another is current,
// e.g. tensors on another device than the current one).
void enqueue(const DeviceState& st, CUfunction function, const Kernel& kern, unsigned grid_x, unsigned grid_y,
             CUstream stream, void** args, const std::string& name) {
  const Driver& d = driver();
  CUcontext current = nullptr;
  check(d.ctx_get_current(&current), "cuCtxGetCurrent");
  const bool swap = current != st.context;
  if (swap) check(d.ctx_push_current(st.context), "cuCtxPushCurrent");
  const CUresult launched = d.launch_kernel(function, grid_x, grid_y, 1, kern.threads, 1, 1, kern.smem_bytes, stream,
                                            args, nullptr);
  if (swap) {
    CUcontext popped;
    d.ctx_pop_current(&popped);
  }
  if (launched != CUDA_SUCCESS) fail(launched, g_package + ": cuLaunchKernel(" + name + ")");
}

// A split-KV launch's own workspace from torch's caching allocator on its stream (stream-ordered, so
// no other launch can hold it meanwhile; inside a CUDA graph capture it comes from the graph's pool
// and lives as long as the graph), uninitialized but for the counters, zeroed before the launch: a
// split writes its part before the combine reads it (as evo/gpu/runtime.py does). Undefined when the
// plan needs none (one split).
at::Tensor split_workspace(const SplitLaunch& plan, int device) {
  if (plan.workspace_bytes <= 0) return at::Tensor();
  at::Tensor workspace =
      at::empty({plan.workspace_bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device));
  workspace.narrow(0, 0, plan.counter_bytes).zero_();
  return workspace;
}

// The tile counter word of `stream` on `device` (docs/kernel-abi.md, "The TMA variant"): 4 bytes zeroed
// once, when the stream's first launch that needs it allocates it (at::zeros, on that stream: ordered
// before the launch); every launch leaves it zero again, so no launch pays for a memset (as
// evo/gpu/runtime.py does). One word per stream: launches on one stream run in order and may share it,
// while two streams' concurrent launches on one word would take each other's tiles. None is allocated
// during CUDA graph capture: a stream without a word yet gets nullptr, and the kernel then deals its
// tiles statically. A word is never freed (a CUDA graph a user captured may hold it), and its tensor is
// leaked so it is not destroyed after torch's allocator is at exit.
void* tile_counter(DeviceState& st, int device, CUstream stream) {
  std::lock_guard<std::mutex> lock(st.counters_mutex);
  const auto found = st.tile_counters.find(stream);
  if (found != st.tile_counters.end()) return found->second;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  check(driver().stream_is_capturing(stream, &capture), "cuStreamIsCapturing");
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE) return nullptr;
  const auto* word = new at::Tensor(at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, device)));
  return st.tile_counters[stream] = word->data_ptr();
}

std::optional<at::Tensor> run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              bool causal, bool bottom_right, std::optional<double> scale) {
  const int index = pick(q, k, v, causal, bottom_right);
  if (index < 0) return std::nullopt;
  const int device = q.get_device();
  DeviceState& st = *g_devices[device];
  if (!ensure_loaded(st, device)) return std::nullopt;
  const Kernel& kern = g_kernels[index];

  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor o = at::empty(qc.sizes(), qc.options());
  int B = static_cast<int>(q.size(0)), H = static_cast<int>(q.size(1)), Hkv = static_cast<int>(k.size(1));
  int L = static_cast<int>(q.size(2)), Lk = static_cast<int>(k.size(2));
  int shift = causal && bottom_right ? Lk - L : 0;   // query i sees keys j <= i + shift
  float s = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(3))));
  void* qp = qc.data_ptr();
  void* kp = kc.data_ptr();
  void* vp = vc.data_ptr();
  void* op = o.data_ptr();
  void* plain[] = {&qp, &kp, &vp, &op, &B, &H, &Hkv, &L, &Lk, &shift, &s};
  void* wsp = nullptr;
  at::Tensor workspace;  // a split-KV launch's, held until the launch is enqueued
  int split_len = 0;
  void* with_workspace[] = {&qp, &kp, &vp, &op, &B, &H, &Hkv, &L, &Lk, &shift, &s, &wsp, &split_len};
  CUstream stream = c10::cuda::getCurrentCUDAStream(device).stream();
  alignas(64) CUtensorMap maps[4];
  void* counter = kern.tile_counter ? tile_counter(st, device, stream) : nullptr;
  // the driver reads as many of these as the kernel has parameters: the counter only where it takes one
  void* with_maps[] = {&maps[0], &maps[1], &maps[2], &maps[3], &qp, &kp, &vp, &op,
                       &B, &H, &Hkv, &L, &Lk, &shift, &s, &counter};
  if (kern.tma) {
    const at::Tensor* tensors[] = {&qc, &kc, &vc, &o};
    for (int i = 0; i < 4; ++i) maps[i] = tensor_map(*tensors[i], kern.tma_rows[i]);
  }
  void** args = kern.tma ? with_maps : kern.split.empty() ? plain : with_workspace;
  const unsigned m_tiles = static_cast<unsigned>((L + kern.rows_per_cta - 1) / kern.rows_per_cta);
  const unsigned tiles = m_tiles * static_cast<unsigned>(B * H);
  unsigned grid_x = kern.persistent ? std::min(tiles, static_cast<unsigned>(st.sms)) : m_tiles;
  unsigned grid_y = kern.persistent ? 1u : static_cast<unsigned>(B * H);
  if (!kern.split.empty()) {
    const SplitLaunch plan = split_launch(kern, B, H, Hkv, L, Lk, st.sms, false);
    grid_x = plan.grid_x;
    grid_y = plan.grid_y;
    split_len = plan.split_len;
    workspace = split_workspace(plan, device);
    if (workspace.defined()) wsp = workspace.data_ptr();
  }

  enqueue(st, st.functions[index], kern, grid_x, grid_y, stream, args, kern.entry);
  return o;
}

// A split-KV call with per-sequence lengths (seqlens, int32 (B,)) and, paged, a block table (int32
// (B, pages_per_seq)) over a pool k, v (pages, Hkv, page_size, D): the kernel's NAME_lens or
// NAME_paged with the plan of its capacity, each sequence's causal mask at its bottom right. None
// when no kernel serves it.
std::optional<at::Tensor> run_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                                    std::optional<double> scale, const at::Tensor& seqlens,
                                    const std::optional<at::Tensor>& block_table) {
  const int index = pick_cache(q, k, v, causal, seqlens, block_table);
  if (index < 0) return std::nullopt;
  const int device = q.get_device();
  DeviceState& st = *g_devices[device];
  if (!ensure_loaded(st, device)) return std::nullopt;
  const Kernel& kern = g_kernels[index];
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor o = at::empty(qc.sizes(), qc.options());
  int B = static_cast<int>(q.size(0)), H = static_cast<int>(q.size(1)), Hkv = static_cast<int>(k.size(1));
  int L = static_cast<int>(q.size(2)), rows = static_cast<int>(k.size(2));   // a pool's rows: its page size
  int page_size = block_table ? rows : 0, pages = block_table ? static_cast<int>(block_table->size(1)) : 0;
  int Lk = block_table ? pages * page_size : rows;        // the capacity: the split plan's length
  int shift = 0;                                          // not read: each sequence's own bottom right
  float s = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(3))));
  void* qp = qc.data_ptr();
  void* kp = kc.data_ptr();
  void* vp = vc.data_ptr();
  void* op = o.data_ptr();
  void* lp = seqlens.data_ptr();
  void* tp = block_table ? block_table->data_ptr() : nullptr;
  void* wsp = nullptr;
  at::Tensor workspace;
  const SplitLaunch plan = split_launch(kern, B, H, Hkv, L, Lk, st.sms, true);
  int split_len = plan.split_len;
  workspace = split_workspace(plan, device);
  if (workspace.defined()) wsp = workspace.data_ptr();
  void* lens_args[] = {&qp, &kp, &vp, &op, &B, &H, &Hkv, &L, &Lk, &shift, &s, &wsp, &split_len, &lp};
  void* paged_args[] = {&qp, &kp, &vp, &op, &B, &H, &Hkv, &L, &Lk, &shift, &s, &wsp, &split_len, &lp, &tp,
                        &page_size, &pages};
  CUstream stream = c10::cuda::getCurrentCUDAStream(device).stream();
  enqueue(st, block_table ? st.paged_functions[index] : st.lens_functions[index], kern, plan.grid_x, plan.grid_y,
          stream, block_table ? paged_args : lens_args, kern.entry + (block_table ? "_paged" : "_lens"));
  return o;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Launcher of the kernels of an evo-promoted attention package";
  m.def("configure", &configure, "Set the cubins, kernels and dispatch routes (once)");
  m.def("supports", &supports, "Whether run() would launch a kernel for these inputs");
  m.def("prepare", &prepare, "Load the kernels on a device; false if they cannot run there");
  m.def("run", &run, "Attention through the dispatch table, or None when SDPA must serve the call",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal"), py::arg("bottom_right"), py::arg("scale"));
  m.def("supports_cache", [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                             const at::Tensor& seqlens, const std::optional<at::Tensor>& block_table) {
          return pick_cache(q, k, v, causal, seqlens, block_table) >= 0;
        }, "Whether run_cache() would launch a kernel for these inputs");
  m.def("run_cache", &run_cache, "Attention with per-sequence lengths (and a block table): a kernel, or None",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal"), py::arg("scale"), py::arg("seqlens"),
        py::arg("block_table"));
}
