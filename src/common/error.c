/* Owns the message table of eerl's error codes. Touches nothing else. */
#include "eerl/error.h"

const char *eerl_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define EERL__ERR_MSG(name, value, msg)                                                            \
    case EERL_##name:                                                                              \
        return msg;
        EERL_ERRNO_MAP(EERL__ERR_MSG)
#undef EERL__ERR_MSG
    default:
        return "unknown error";
    }
}

const char *eerl_err_name(int err)
{
    switch (err) {
    case 0:
        return "OK";
#define EERL__ERR_NAME(name, value, msg)                                                           \
    case EERL_##name:                                                                              \
        return "EERL_" #name;
        EERL_ERRNO_MAP(EERL__ERR_NAME)
#undef EERL__ERR_NAME
    default:
        return "EERL_UNKNOWN";
    }
}
