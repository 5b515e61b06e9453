/* check.h: the assertion counter shared by the native test programs (one per program). */
#ifndef SRPC_TEST_CHECK_H
#define SRPC_TEST_CHECK_H

#include <stdio.h>

static int passed, failed;

/* Counts a check; on failure prints where, the condition and a printf-style note. */
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            passed++;                                                      \
        } else {                                                           \
            failed++;                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

#endif
