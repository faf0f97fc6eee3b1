/* Reports the version of the library that is actually loaded. */
#include "eerl/version.h"

unsigned eerl_version(void)
{
    return EERL_VERSION_HEX;
}

const char *eerl_version_string(void)
{
    return EERL_VERSION_STRING;
}

unsigned eerl_abi_version(void)
{
    return EERL_ABI_VERSION;
}
