/*
 * backends/cuda/cuda_mma.cuh - the tensor-core and asynchronous-copy pieces
 * that the attention kernels (cuda_attention_mma.cu) and the float32 matrix
 * product (cuda_gemm_tf32x3.cu) share: TF32 mma.sync, rounding to TF32, and
 * cp.async. Warp-level PTX, sm_80 and later.
 */
#ifndef AWL_BACKENDS_CUDA_MMA_CUH
#define AWL_BACKENDS_CUDA_MMA_CUH

#include <stdint.h>

namespace
{

/* c (16 x 8, float32) += a (16 x 8, TF32, row) b (8 x 8, TF32, col): with g =
 * lane / 4 and t = lane % 4, a lane holds a at (g, t), (g+8, t), (g, t+4),
 * (g+8, t+4), b at (k = t, n = g), (k = t+4, n = g), and c at (g, 2t..2t+1),
 * (g+8, 2t..2t+1) (PTX ISA, "Matrix fragments for mma.m16n8k8"). */
__device__ __forceinline__ void mma1688(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* x rounded to TF32 (nearest, ties away from zero), as the bits of a float:
 * half a TF32 unit added to the magnitude's bits, then the 13 bits TF32
 * drops cleared. Two integer instructions where cvt.rna.tf32.f32 takes four
 * on sm_90 (it also screens out infinities and NaN, which need no care
 * here: an infinity stays one, and either makes the product NaN anyway). */
__device__ __forceinline__ uint32_t to_tf32(float x)
{
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

/* An operand of P passes: big = tf32(x), and for P = 3 also
 * small = tf32(x - big), the bits big dropped. */
template <int P> struct tf32_split {
    uint32_t big, small;
    __device__ __forceinline__ explicit tf32_split(float x)
    {
        big = to_tf32(x);
        small = P == 3 ? to_tf32(x - __uint_as_float(big)) : 0u;
    }
};

/* Asynchronous copies (cp.async, sm_80+): 16 bytes from global to shared
 * memory without passing through registers; a thread groups the copies it
 * has issued with commit and waits until at most N groups are in flight. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

} // namespace

#endif
