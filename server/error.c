/*
 * error: messages of the server/ error table (see error.h). Any thread.
 */
#include "server/error.h"

const char *srv_strerror(int err)
{
    switch (err) {
#define SRV_ERR_STR(name, value, msg) \
    case value:                       \
        return msg;
        SRV_ERRORS(SRV_ERR_STR)
#undef SRV_ERR_STR
    }
    return "unknown error";
}
