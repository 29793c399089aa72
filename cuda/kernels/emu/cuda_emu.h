// cuda_emu.h: just enough of CUDA to compile the kernels in cuda/kernels
// with g++ (-std=c++20 -pthread) and run them on CPU threads, so that they
// can be tested on machines without a GPU (emu_test.cc, run.sh,
// cuda/emu_test.go).
//
// A launch runs the grid's blocks one after another; the block's threads
// are real std::threads, one per CUDA thread (thread t of every block runs
// on worker t of a pool that outlives launches). What the kernels rely on
// is emulated with the same guarantees CUDA gives, no more:
//   - __syncthreads() is a std::barrier over the block's threads;
//   - warp shuffles exchange values through a per-warp array between two
//     waits on a per-warp barrier, so all 32 lanes must take part (as
//     CUDA's full mask requires); a partial warp or another mask aborts;
//   - shared memory (declared with GC_SHARED, see common.cuh) is one buffer
//     per declaration per block, filled with 0xFF bytes (NaN doubles,
//     -1 ints) at the start of each block, so reads of unwritten shared
//     memory show up;
//   - atomicOr is std::atomic_ref.
// The threads of a block interleave freely, so a kernel that depends on an
// ordering CUDA does not promise can fail here too.
#pragma once

#include <math.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#define GC_EMU 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// Shared memory must be declared with GC_SHARED: a plain local variable
// would be private to each emulated thread.
#define __shared__ __shared___is_not_emulated__use_GC_SHARED

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
        : x(x_), y(y_), z(z_) {}
};

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
static constexpr int warpSize = 32;

namespace emu {

[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "cuda_emu: %s\n", what);
    std::fflush(stderr);
    std::abort();
}

// Warp is the exchange area of one warp's shuffles.
struct Warp {
    explicit Warp(std::ptrdiff_t lanes) : size(int(lanes)), bar(lanes) {}
    int size;
    std::barrier<> bar;
    unsigned long long slot[32];
};

// Block is what the threads of the running block share.
struct Block {
    explicit Block(std::ptrdiff_t threads) : bar(threads) {}
    std::barrier<> bar;
    std::vector<std::unique_ptr<Warp>> warps;
    std::mutex mu;
    struct Buffer {
        std::unique_ptr<std::max_align_t[]> mem;
        std::size_t bytes;
    };
    std::map<const void*, Buffer> shared;  // by declaration site
};

inline thread_local Block* block;
inline thread_local int linear;  // the thread's index in its block

// shared_array returns the block's buffer for the declaration site (an
// address unique to one GC_SHARED), allocating it on first use.
template <class T>
T* shared_array(const void* site, std::size_t count) {
    Block& b = *block;
    std::lock_guard<std::mutex> lock(b.mu);
    auto it = b.shared.find(site);
    if (it == b.shared.end()) {
        std::size_t bytes = count * sizeof(T);
        std::size_t words = (bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
        Block::Buffer buf{std::make_unique<std::max_align_t[]>(words ? words : 1), bytes};
        std::memset(buf.mem.get(), 0xFF, bytes);
        it = b.shared.emplace(site, std::move(buf)).first;
    } else if (it->second.bytes != count * sizeof(T)) {
        fail("one shared declaration with two sizes");
    }
    return reinterpret_cast<T*>(it->second.mem.get());
}

inline Warp& warp() { return *block->warps[linear / 32]; }

// exchange publishes v as this lane's value and returns lane src's, with
// every lane of the warp taking part.
template <class T>
T exchange(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
    Warp& w = warp();
    if (mask != 0xffffffffu || w.size != 32) fail("shuffle without a full warp and a full mask");
    const int lane = linear % 32;
    std::memcpy(&w.slot[lane], &v, sizeof(T));
    w.bar.arrive_and_wait();  // every lane has published
    T r = v;
    if (src >= 0 && src < 32) std::memcpy(&r, &w.slot[src], sizeof(T));
    w.bar.arrive_and_wait();  // every lane has read before the next publish
    return r;
}

// Pool holds the worker threads: worker t runs CUDA thread t of every
// block of a launch. The workers are created when a launch first needs
// them and kept for later launches (creating 256 threads per launch would
// cost more than the kernels).
class Pool {
   public:
    // run calls job(t) on worker t for t < n, and returns when all are done.
    void run(int n, std::function<void(int)> job) {
        std::unique_lock<std::mutex> lock(mu_);
        while ((int)workers_.size() < n) {
            const int id = (int)workers_.size();
            workers_.emplace_back([this, id] { work(id); });
        }
        job_ = std::move(job);
        active_ = n;
        remaining_ = n;
        ++generation_;
        wake_.notify_all();
        done_.wait(lock, [this] { return remaining_ == 0; });
        job_ = nullptr;
    }

    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        wake_.notify_all();
        for (auto& w : workers_) w.join();
    }

   private:
    void work(int id) {
        unsigned long long seen = 0;
        for (;;) {
            std::function<void(int)>* job;
            {
                std::unique_lock<std::mutex> lock(mu_);
                wake_.wait(lock, [&] { return stop_ || (generation_ != seen && id < active_); });
                if (stop_) return;
                seen = generation_;
                job = &job_;
            }
            (*job)(id);
            std::lock_guard<std::mutex> lock(mu_);
            if (--remaining_ == 0) done_.notify_one();
        }
    }

    std::mutex mu_;
    std::condition_variable wake_, done_;
    std::vector<std::thread> workers_;
    std::function<void(int)> job_;
    unsigned long long generation_ = 0;
    int active_ = 0, remaining_ = 0;
    bool stop_ = false;
};

inline Pool pool;

// launch runs kernel k over the grid, like k<<<grid, block>>>(args...)
// followed by a synchronisation. Every parameter of a gocurrent kernel is 8
// bytes (ABI.md); launch checks that too.
template <class... P, class... A>
void launch(void (*k)(P...), dim3 grid, dim3 blk, A... args) {
    static_assert(sizeof...(P) == sizeof...(A), "wrong number of kernel arguments");
    static_assert(((sizeof(P) == 8) && ...), "every kernel parameter must be 8 bytes (ABI.md)");
    const std::tuple<P...> params(static_cast<P>(args)...);
    const long long threads = (long long)blk.x * blk.y * blk.z;
    if (threads <= 0 || threads > 1024) fail("block size out of range");
    const long long blocks = (long long)grid.x * grid.y * grid.z;
    if (blocks <= 0) fail("empty grid");

    // One Block context per launch, reset between blocks by the completion
    // step of the barrier that separates them (which runs while every
    // thread waits).
    Block ctx(threads);
    for (long long w0 = 0; w0 < threads; w0 += 32)
        ctx.warps.push_back(std::make_unique<Warp>(std::min<long long>(32, threads - w0)));
    auto between = [&ctx]() noexcept {
        for (auto& [site, buf] : ctx.shared) std::memset(buf.mem.get(), 0xFF, buf.bytes);
    };
    std::barrier<decltype(between)> gate(threads, between);

    pool.run(int(threads), [&](int t) {
        block = &ctx;
        linear = t;
        blockDim = blk;
        gridDim = grid;
        threadIdx = {unsigned(t % blk.x), unsigned(t / blk.x % blk.y),
                     unsigned(t / ((long long)blk.x * blk.y))};
        for (long long b = 0; b < blocks; ++b) {
            blockIdx = {unsigned(b % grid.x), unsigned(b / grid.x % grid.y),
                        unsigned(b / ((long long)grid.x * grid.y))};
            std::apply(k, params);
            gate.arrive_and_wait();  // the block is done; the next may start
        }
        block = nullptr;
    });
}

}  // namespace emu

// GC_SHARED (common.cuh) under the emulator: a pointer to the block's
// buffer for this declaration, found by the address of a static tag.
#define GC_SHARED(type, name, count)  \
    static char name##_gc_emu_site;   \
    type* name = ::emu::shared_array<type>(&name##_gc_emu_site, (count))

inline void __syncthreads() { emu::block->bar.arrive_and_wait(); }

template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    if (width != 32) emu::fail("shuffle width other than 32");
    return emu::exchange(mask, v, (emu::linear % 32) ^ lane_mask);
}

template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    if (width != 32) emu::fail("shuffle width other than 32");
    const int src = emu::linear % 32 + int(delta);
    return emu::exchange(mask, v, src < 32 ? src : -1);
}

template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    if (width != 32) emu::fail("shuffle width other than 32");
    return emu::exchange(mask, v, src & 31);
}

inline unsigned int atomicOr(unsigned int* p, unsigned int v) {
    return std::atomic_ref<unsigned int>(*p).fetch_or(v);
}

template <class T>
T __ldg(const T* p) {
    return *p;
}
