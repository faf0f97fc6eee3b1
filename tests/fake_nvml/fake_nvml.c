/* Placeholder for the stand-in NVML library. */
int nvmlInit_v2(void);
int nvmlInit_v2(void)
{
    return 0;
}
