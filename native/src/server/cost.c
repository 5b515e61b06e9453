/* cost.c: admission cost (see cost.h). */
#include "server/cost.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/callring.h"

/* The input tensor that holds every key, and where the keys start in it: -1 when they do not
 * lie within one tensor (a raw function's one input is checked against each request's length). */
static int key_tensor(const srpc_fn_t *fn, uint32_t *at)
{
    const uint64_t end = (uint64_t)fn->cost_key_offset + (uint64_t)fn->cost_key_count * fn->cost_key_size;
    uint64_t start = 0;
    for (uint32_t k = 0; k < fn->n_in; k++) {
        if (fn->cost_key_offset >= start && end <= start + fn->in_size[k]) {
            *at = (uint32_t)(fn->cost_key_offset - start);
            return (int)k;
        }
        start += fn->in_size[k];
    }
    return -1;
}

int srpc_cost_setup(srpc_fn_t *fn, const srpc_func_config_t *fc)
{
    fn->cost_from = fc->cost_from;
    fn->max_batch_cost = fc->max_batch_cost;
    if (fc->cost_from == SRPC_COST_TABLE) {
        uint32_t at;
        fn->cost_key_offset = fc->cost_key_offset;
        fn->cost_key_count = fc->cost_key_count;
        fn->cost_key_size = fc->cost_key_size;
        if (!fc->cost_table || fc->cost_table_len == 0 || fc->on_gpu || (fc->cost_key_count == 0 && !fn->raw) ||
            (fc->cost_key_size != 4 && fc->cost_key_size != 8) || key_tensor(fn, &at) < 0)
            return -EINVAL;
        fn->cost_table = malloc((size_t)fc->cost_table_len * sizeof(uint32_t));
        if (!fn->cost_table)
            return -ENOMEM;
        memcpy(fn->cost_table, fc->cost_table, (size_t)fc->cost_table_len * sizeof(uint32_t));
        fn->cost_table_len = fc->cost_table_len;
    } else if (fc->cost_from != SRPC_COST_NONE && fc->cost_from != SRPC_COST_AUX) {
        return -EINVAL;
    }
    if (fc->cost_from != SRPC_COST_NONE && !(fn->batch_cost = calloc(fn->max_batch, sizeof(uint32_t))))
        return -ENOMEM;
    return 0;
}

void srpc_cost_free(srpc_fn_t *fn)
{
    free(fn->cost_table);
    free(fn->batch_cost);
    fn->cost_table = fn->batch_cost = NULL;
}

/* Key i of a request whose keys start at p: a little-endian signed integer of 4 or 8 bytes. */
static int64_t key_at(const uint8_t *p, uint32_t size, uint32_t i)
{
    p += (size_t)i * size;
    if (size == 4) {
        uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        return (int32_t)v;
    }
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = v << 8 | p[b];
    return (int64_t)v;
}

/* How many cost keys a request of len bytes holds: 0 with *count, or -EINVAL with why. */
static int key_count(const srpc_fn_t *fn, uint32_t len, uint32_t *count, char *why, size_t n)
{
    *count = fn->cost_key_count;
    if (*count == 0) { /* a raw function's keys run from the offset to the end of its request */
        if (len < fn->cost_key_offset || (len - fn->cost_key_offset) % fn->cost_key_size != 0) {
            snprintf(why, n, "a request of %u bytes does not hold whole %u-byte cost keys after byte %u", len,
                     fn->cost_key_size, fn->cost_key_offset);
            return -EINVAL;
        }
        *count = (len - fn->cost_key_offset) / fn->cost_key_size;
    }
    return 0;
}

/* The summed table rows of the count keys at p (at most UINT32_MAX): 0 with *cost, or -EINVAL
 * with why naming the first key outside the table. */
static int sum_keys(const srpc_fn_t *fn, const uint8_t *p, uint32_t count, uint32_t *cost, char *why, size_t n)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < count; i++) {
        const int64_t key = key_at(p, fn->cost_key_size, i);
        if (key < 0 || (uint64_t)key >= fn->cost_table_len) {
            snprintf(why, n, "cost key %" PRId64 " (key %u, at byte %u) is outside the table of %u rows", key, i,
                     fn->cost_key_offset + i * fn->cost_key_size, fn->cost_table_len);
            return -EINVAL;
        }
        sum += fn->cost_table[key];
    }
    *cost = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
    return 0;
}

static int no_room(uint32_t len, uint32_t count, uint32_t offset, char *why, size_t n)
{
    snprintf(why, n, "a request of %u bytes has no room for its %u cost keys at byte %u", len, count, offset);
    return -EINVAL;
}

/* The cost of the call whose request (len bytes, header aux) is in element seq: 0 with *cost,
 * or -EINVAL with why (n bytes) saying which key is bad. */
static int cost_of(const srpc_fn_t *fn, uint64_t seq, uint32_t len, uint16_t aux, uint32_t *cost, char *why, size_t n)
{
    *cost = 0;
    if (fn->cost_from == SRPC_COST_AUX)
        *cost = aux;
    if (fn->cost_from != SRPC_COST_TABLE)
        return 0;
    uint32_t at, count;
    const int k = key_tensor(fn, &at);
    if (key_count(fn, len, &count, why, n) != 0)
        return -EINVAL;
    const uint64_t end = (uint64_t)fn->cost_key_offset + (uint64_t)count * fn->cost_key_size;
    if (k < 0 || (fn->raw && end > len)) /* fixed sizes were checked at registration */
        return no_room(len, count, fn->cost_key_offset, why, n);
    return sum_keys(fn, srpc_tq_elem(fn->in_tq[k], seq) + at, count, cost, why, n);
}

int srpc_cost_class(const srpc_fn_t *fn, const uint8_t *req, uint32_t len, uint16_t aux, uint32_t *cost, char *why,
                    size_t n)
{
    uint32_t count;
    *cost = fn->cost_from == SRPC_COST_AUX ? aux : 0;
    if (fn->cost_from == SRPC_COST_TABLE) {
        if (key_count(fn, len, &count, why, n) != 0)
            return -EINVAL;
        if ((uint64_t)fn->cost_key_offset + (uint64_t)count * fn->cost_key_size > len)
            return no_room(len, count, fn->cost_key_offset, why, n);
        if (sum_keys(fn, req + fn->cost_key_offset, count, cost, why, n) != 0)
            return -EINVAL;
    }
    int c = 0;
    while (c + 1 < (int)fn->n_classes && *cost >= fn->class_bounds[c])
        c++;
    return c;
}

void srpc_cost_admit_locked(srpc_server_t *srv, srpc_fn_t *fn, uint64_t seq, uint16_t aux)
{
    SRPC_ASSERT_LOCKED(srv);
    srpc_call_t *c = &fn->calls[seq % fn->capacity];
    char why[SRPC_ERRMSG_MAX + 1];
    if (cost_of(fn, seq, c->in_len, aux, &c->cost, why, sizeof(why)) != 0)
        srpc_ring_refuse_locked(srv, fn, seq, SRPC_E_BAD_REQUEST, why);
}
