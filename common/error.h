/*
 * common/error.h - the error model shared by every layer.
 *
 * awl never aborts its host program on bad input. A function that fails
 * records a message in a thread-local slot and returns NULL (functions that
 * return a tensor) or a negative status (functions that return int):
 *
 *     awl_tensor *c = awl_matmul(a, b);
 *     if (!c) fprintf(stderr, "%s\n", awl_last_error());
 *     // "awl_matmul: inner dimensions differ: (4,3) @ (5,2)"
 *
 * An op given a NULL input returns NULL without touching the message, so the
 * first failure in a chain of ops is the one reported and a whole forward pass
 * can be checked once, at the end.
 *
 * Setting AWL_ABORT_ON_ERROR=1 in the environment, or calling
 * awl_set_abort_on_error(true), turns the first recorded error into an abort
 * that prints the message: useful under a debugger.
 *
 * This module sits below the backends so that a backend can report an
 * out-of-memory or device error in the same way as the layers above it.
 */
#ifndef AWL_COMMON_ERROR_H
#define AWL_COMMON_ERROR_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Every status-returning function returns 0 or one of these. */
enum {
    AWL_OK = 0,
    AWL_ERR_INVALID = -1,     /* bad argument: shape, dtype, index, option  */
    AWL_ERR_OOM = -2,         /* an allocation failed                       */
    AWL_ERR_DEVICE = -3,      /* the device or its library reported a fault */
    AWL_ERR_IO = -4,          /* a file could not be read or written        */
    AWL_ERR_FORMAT = -5,      /* a file is malformed, truncated or corrupt  */
    AWL_ERR_UNSUPPORTED = -6, /* a backend lacks an optional kernel; the
                                 caller falls back, no message is recorded  */
    AWL_ERR_DIST = -7,        /* a distributed job failed: a peer died, went
                                 silent, timed out or disagreed (the message
                                 names the rank, the operation and its
                                 sequence number)                           */
    AWL_ERR_NOT_IMPLEMENTED = -8, /* a required primitive is not written
                                     yet (the student backend's stubs); the
                                     message names it and where it goes   */
};

/* Records a printf-style message as the thread's last error and returns
 * `code` (so `return awl_error(AWL_ERR_INVALID, "...")` reads naturally).
 * Aborts instead when abort-on-error is on. */
int awl_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The thread's last error message, or "" when none has been recorded since
 * the last awl_clear_error(). The pointer stays valid until the next error. */
const char *awl_last_error(void);

/* The status code recorded with the last error, or AWL_OK. */
int awl_last_error_code(void);

/* How many errors this thread has recorded so far: code that must know
 * whether a call it made failed, when the call returned no status, compares
 * this before and after. */
unsigned long awl_error_count(void);

/* Forgets the recorded error. */
void awl_clear_error(void);

/* Turns abort-on-error on or off (overrides AWL_ABORT_ON_ERROR). */
void awl_set_abort_on_error(bool on);

#ifdef __cplusplus
}
#endif

#endif
