/* tensor_queue.c: host Tensor Queue, a ring of fixed-size elements mapped twice back to back. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/ring.h"
#include "splitrpc_core.h"

struct srpc_tq {
    uint8_t *base;      /* lower mapping; the upper one starts at base + ring_bytes */
    size_t ring_bytes;  /* capacity * elem_size rounded up to whole pages */
    size_t elem_size;
    uint32_t capacity;
};

/* Maps a fresh memfd of ring_bytes twice, at base and base + ring_bytes. Returns the base
 * or MAP_FAILED with errno set; nothing is left behind on failure. */
static uint8_t *map_twice(size_t ring_bytes)
{
    int fd = memfd_create("srpc_tq", MFD_CLOEXEC);
    if (fd < 0)
        return MAP_FAILED;

    uint8_t *base = MAP_FAILED;
    if (ftruncate(fd, (off_t)ring_bytes) < 0)
        goto out;
    /* Reserve the whole span first so that nobody else can take the upper half. */
    base = mmap(NULL, 2 * ring_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        goto out;
    for (size_t half = 0; half < 2; half++) {
        void *p = mmap(base + half * ring_bytes, ring_bytes, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_FIXED, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            munmap(base, 2 * ring_bytes);
            base = MAP_FAILED;
            errno = err;
            goto out;
        }
    }
out:;
    int err = errno;
    close(fd); /* the mappings, if any, keep the memory alive */
    errno = err;
    return base;
}

int srpc_tq_create(size_t elem_size, uint32_t capacity, srpc_tq_t **out)
{
    return srpc_tq_create_aligned(elem_size, capacity, 1, out);
}

int srpc_tq_create_aligned(size_t elem_size, uint32_t capacity, size_t align, srpc_tq_t **out)
{
    if (!out || elem_size == 0 || capacity == 0 || align == 0 || (align & (align - 1)))
        return -EINVAL;
    *out = NULL;

    long page_l = sysconf(_SC_PAGESIZE);
    size_t page = page_l > 0 ? (size_t)page_l : 4096;
    if (align < page) /* both are powers of two: the larger is a multiple of the smaller */
        align = page;
    size_t bytes;
    if (__builtin_mul_overflow(elem_size, (size_t)capacity, &bytes))
        return -EOVERFLOW;
    if (bytes > SIZE_MAX - (align - 1))
        return -EOVERFLOW;
    size_t ring_bytes = (bytes + align - 1) / align * align;
    /* The reservation is 2 * ring_bytes and ftruncate takes an off_t. */
    if (ring_bytes > SIZE_MAX / 2 || (uint64_t)ring_bytes > (uint64_t)INT64_MAX / 2)
        return -EOVERFLOW;

    srpc_tq_t *tq = calloc(1, sizeof(*tq));
    if (!tq)
        return -ENOMEM;
    tq->base = map_twice(ring_bytes);
    if (tq->base == MAP_FAILED) {
        int err = errno;
        free(tq);
        return -err;
    }
    tq->ring_bytes = ring_bytes;
    tq->elem_size = elem_size;
    tq->capacity = capacity;
    *out = tq;
    return 0;
}

void srpc_tq_destroy(srpc_tq_t *tq)
{
    if (!tq)
        return;
    munmap(tq->base, 2 * tq->ring_bytes);
    free(tq);
}

uint8_t *srpc_tq_elem(const srpc_tq_t *tq, uint64_t seq)
{
    return tq->base + srpc_ring_offset(seq, tq->elem_size, tq->ring_bytes);
}

uint8_t *srpc_tq_base(const srpc_tq_t *tq)
{
    return tq->base;
}

size_t srpc_tq_ring_bytes(const srpc_tq_t *tq)
{
    return tq->ring_bytes;
}

size_t srpc_tq_elem_size(const srpc_tq_t *tq)
{
    return tq->elem_size;
}

uint32_t srpc_tq_capacity(const srpc_tq_t *tq)
{
    return tq->capacity;
}

int srpc_tq_scatter(srpc_tq_t *const *tqs, const uint32_t *sizes, uint32_t n, uint64_t seq,
                    const void *data, uint32_t len)
{
    if (!tqs || !sizes || n == 0 || (!data && len))
        return -EINVAL;
    uint64_t total = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (!tqs[k] || sizes[k] > tqs[k]->elem_size)
            return -EINVAL;
        total += sizes[k];
    }
    if (n == 1 ? len > sizes[0] : len != total)
        return -EINVAL;

    const uint8_t *src = data;
    if (n == 1) {
        if (len)
            memcpy(srpc_tq_elem(tqs[0], seq), src, len);
        return 0;
    }
    for (uint32_t k = 0; k < n; k++) {
        if (sizes[k])
            memcpy(srpc_tq_elem(tqs[k], seq), src, sizes[k]);
        src += sizes[k];
    }
    return 0;
}
