/*
 * backends/registry.c - backends by name, and the names of op codes.
 *
 * The built-in backends register themselves on first lookup, so a program
 * never has to initialise anything; a custom backend calls
 * awl_backend_register() before its first tensor.
 *
 * Threads: the built-ins are registered once (pthread_once); registering
 * takes a mutex and publishes the new entry with an atomic count, so
 * lookups, which happen on every tensor creation, take no lock.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "backends/backend.h"

#define MAX_BACKENDS 8

static _Atomic(const awl_backend *) registered[MAX_BACKENDS];
static atomic_int n_registered;
static pthread_mutex_t register_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

static int add(const awl_backend *backend)
{
    int status = AWL_OK;
    pthread_mutex_lock(&register_mu);
    int n = atomic_load(&n_registered), i = 0;
    while (i < n && strcmp(atomic_load(&registered[i])->name, backend->name) != 0) i++;
    if (i < n) {
        atomic_store(&registered[i], backend);
    } else if (n == MAX_BACKENDS) {
        status = awl_error(AWL_ERR_INVALID, "awl_backend_register: more than %d backends",
                           MAX_BACKENDS);
    } else {
        atomic_store(&registered[n], backend);
        atomic_store(&n_registered, n + 1);
    }
    pthread_mutex_unlock(&register_mu);
    return status;
}

static void register_builtins(void)
{
    add(awl_cpu_backend());
    if (awl_cuda_backend()) add(awl_cuda_backend());
    if (awl_student_backend()) add(awl_student_backend());
}

int awl_backend_register(const awl_backend *backend)
{
    if (!backend || !backend->name)
        return awl_error(AWL_ERR_INVALID, "awl_backend_register: backend has no name");
    pthread_once(&builtins_once, register_builtins);
    return add(backend);
}

int awl_backend_count(void)
{
    pthread_once(&builtins_once, register_builtins);
    return atomic_load(&n_registered);
}

const awl_backend *awl_backend_at(int i)
{
    return i >= 0 && i < awl_backend_count() ? atomic_load(&registered[i]) : NULL;
}

const awl_backend *awl_backend_find(const char *name)
{
    int n = awl_backend_count();
    for (int i = 0; i < n; i++) {
        const awl_backend *b = atomic_load(&registered[i]);
        if (strcmp(b->name, name) == 0) return b;
    }
    return NULL;
}

bool awl_backend_has(const awl_backend *b, awl_kernel kernel)
{
    switch (kernel) {
#define HAS_ENTRY(K, field, milestone, dtypes, required)                                           \
    case AWL_KERNEL_##K: return b->field != NULL;
        AWL_KERNELS(HAS_ENTRY)
#undef HAS_ENTRY
    default: return false;
    }
}

bool awl_backend_supports(const awl_backend *b, awl_kernel kernel, int op, awl_dtype dtype)
{
    return b && awl_backend_has(b, kernel) && awl_kernel_defined(kernel, op, dtype) &&
           (!b->supports || b->supports(kernel, op, dtype));
}

#ifndef AWL_WITH_CUDA
const awl_backend *awl_cuda_backend(void) { return NULL; }
#endif
#ifndef AWL_WITH_STUDENT
const awl_backend *awl_student_backend(void) { return NULL; }
#endif
