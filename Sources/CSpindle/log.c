/*
 * log.c — where the engine's diagnostics go.
 *
 * The engine says very little, and only once per process for each kind of fallback: a
 * machine scheduled as one NUMA node, a misuse it is about to abort on. By default
 * each message is one line on stderr, prefixed "spindle: ". A program that has a
 * logger installs a handler (the Swift façade forwards to swift-log), and the message
 * goes there instead, with its level.
 *
 * The handler and its context are published together, as one allocated pair, with a
 * release store; a message reads the pair with an acquire load, so it never pairs one
 * handler with another's context. A replaced pair is never freed: a message being
 * delivered may still be reading it, and a process installs a handler a handful of
 * times at most.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct log_target {
    spindle_log_fn fn;
    void *ctx;
} log_target;

static _Atomic(log_target *) current; /* NULL: stderr */

void spindle_set_log_handler(spindle_log_fn fn, void *ctx) {
    log_target *t = NULL;
    if (fn) {
        t = malloc(sizeof *t);
        if (!t) return; /* keeps the previous target: diagnostics are best effort */
        t->fn = fn;
        t->ctx = ctx;
    }
    /* Release: the pair's contents before the pointer to it (acquire in spindle_log). */
    atomic_store_explicit(&current, t, memory_order_release);
}

void spindle_log(spindle_log_level level, const char *format, ...) {
    char message[512];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    /* Acquire: pairs with spindle_set_log_handler's release. */
    const log_target *t = atomic_load_explicit(&current, memory_order_acquire);
    if (t) t->fn(level, message, t->ctx);
    else fprintf(stderr, "spindle: %s\n", message);
}
