/*
 * common/error.c - the thread-local last-error slot (see error.h).
 */
#include "common/error.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char error_message[1024];
static _Thread_local int error_code;
static _Thread_local unsigned long error_count;

/* -1: not yet decided, read AWL_ABORT_ON_ERROR on first use (any thread may
 * be first; they all read the same environment). */
static atomic_int abort_on_error = -1;

static bool should_abort(void)
{
    if (atomic_load(&abort_on_error) < 0) {
        const char *env = getenv("AWL_ABORT_ON_ERROR");
        atomic_store(&abort_on_error, env && env[0] && strcmp(env, "0") != 0);
    }
    return atomic_load(&abort_on_error) == 1;
}

int awl_error(int code, const char *fmt, ...)
{
    /* formatted apart first: a message often quotes the last one
     * ("...: %s", awl_last_error()), which is error_message itself */
    char message[sizeof error_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    memcpy(error_message, message, sizeof message);
    error_code = code;
    error_count++;
    if (should_abort()) {
        fprintf(stderr, "awl: aborting on error: %s\n", error_message);
        abort();
    }
    return code;
}

const char *awl_last_error(void) { return error_message; }

int awl_last_error_code(void) { return error_code; }

unsigned long awl_error_count(void) { return error_count; }

void awl_clear_error(void)
{
    error_message[0] = '\0';
    error_code = AWL_OK;
}

void awl_set_abort_on_error(bool on) { atomic_store(&abort_on_error, on ? 1 : 0); }
