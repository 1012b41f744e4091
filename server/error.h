/*
 * error: the error codes of server/ with their messages, from one table.
 * Pure functions, any thread.
 */
#ifndef QWEN3D_SERVER_ERROR_H
#define QWEN3D_SERVER_ERROR_H

#define SRV_ERRORS(X)                                                   \
    X(SRV_OK, 0, "success")                                             \
    X(SRV_ENOMEM, -1, "out of memory")                                  \
    X(SRV_EFULL, -2, "the request queue is full")                       \
    X(SRV_ESHUTDOWN, -3, "the server is shutting down")                 \
    X(SRV_ELOADING, -4, "the model is still loading")                   \
    X(SRV_ECONFIG, -5, "invalid configuration")                         \
    X(SRV_EHTTP, -6, "the HTTP server could not start")                 \
    X(SRV_ELOOP, -7, "the event loop failed")                           \
    X(SRV_ETHREAD, -8, "a thread could not be started")                 \
    X(SRV_EKVBUDGET, -9, "the request needs more KV cache than the budget")  \
    X(SRV_ECHOICES, -10, "the request has more choices than a step has rows")

enum {
#define SRV_ERR_ENUM(name, value, msg) name = value,
    SRV_ERRORS(SRV_ERR_ENUM)
#undef SRV_ERR_ENUM
};

const char *srv_strerror(int err);

#endif
