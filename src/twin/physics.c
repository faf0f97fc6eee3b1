/* GPU physics. Time at clock f of a phase with time W at fmax:
 *   W * (b + (1 - b) * h(f) / h(fmax)),  h(f) = (1 + (r fmax / f)^k)^(1/k),  k = 3,
 * a smooth roofline max(memory time, compute time): memory-bound work (r << 1) barely slows
 * until compute time overtakes it at low clocks, compute-bound work (r >= 1) slows ~ 1/f.
 * Power: static + pm + (idle_dyn + pw) * V(f)^2 f / fmax, with
 *   V(f) = v_floor + (1 - v_floor) ((f - f_knee) / (fmax - f_knee))^v_gamma above f_knee,
 * flat below; pm is the part of an active phase's draw that does not follow the SM clock (HBM and
 * I/O traffic). A GPU waiting inside the job draws idle + p_wait_w V^2 f / fmax (a blocked
 * collective or a polling runtime keeps part of the chip busy; parked at the idle clock it
 * mostly stops paying it).
 * Rendezvous: the asynchronous modes wait for the later of two pools whose work times
 * spread by `jitter` (relative) from seed to seed; the expected update uses E[max] of two
 * normals (Clark 1961):
 *   a Phi(x) + b Phi(-x) + s phi(x), s = jitter sqrt(a^2 + b^2), x = (a - b) / s. */
#include <math.h>
#include <string.h>

#include "eerl/error.h"
#include "twin/physics.h"

#define ROOFLINE_K 3.0
#define SQRT_HALF 0.70710678118654752
#define INV_SQRT_2PI 0.39894228040143268

double eerl__gpu_dyn(const struct eerl__gpu *g, double f)
{
    double fm = g->fmax, v;

    if (f <= g->f_knee)
        v = g->v_floor;
    else if (g->v_gamma == 1 || g->v_gamma <= 0)
        v = g->v_floor + (1 - g->v_floor) * (f - g->f_knee) / (fm - g->f_knee);
    else
        v = g->v_floor + (1 - g->v_floor) * pow((f - g->f_knee) / (fm - g->f_knee), g->v_gamma);
    if (v > 1 && f <= fm)
        v = 1;
    return v * v * f / fm;
}

double eerl__gpu_idle_w(const struct eerl__gpu *g, double f)
{
    return g->p_static_w + g->p_idle_dyn_w * eerl__gpu_dyn(g, f);
}

double eerl__gpu_wait_w(const struct eerl__gpu *g, double f)
{
    return eerl__gpu_idle_w(g, f) + g->p_wait_w * eerl__gpu_dyn(g, f);
}

double eerl__gpu_rendezvous(const struct eerl__gpu *g, double a, double b)
{
    double s = g->jitter * sqrt(a * a + b * b), x;

    if (!(s > 1e-12 * (a + b)))
        return a > b ? a : b;
    x = (a - b) / s;
    return a * 0.5 * erfc(-x * SQRT_HALF) + b * 0.5 * erfc(x * SQRT_HALF) +
           s * exp(-0.5 * x * x) * INV_SQRT_2PI;
}

double eerl__gpu_active_w(const struct eerl__gpu *g, const struct eerl__phase_phys *ph, double f)
{
    return g->p_static_w + ph->pm + (g->p_idle_dyn_w + ph->pw) * eerl__gpu_dyn(g, f);
}

double eerl__gpu_eff_clock(const struct eerl__gpu *g, const struct eerl__phase_phys *ph,
                           unsigned req_mhz, int *ret_capped)
{
    double f = req_mhz == 0 ? g->gov_mhz : req_mhz - g->droop_mhz, lo, hi;
    int i;

    if (f > g->gov_mhz)
        f = g->gov_mhz;
    if (ret_capped)
        *ret_capped = 0;
    if (eerl__gpu_active_w(g, ph, f) <= g->cap_w)
        return f;
    /* Power rises monotonically with f: bisect for the clock where it meets the cap. */
    lo = 100;
    hi = f;
    for (i = 0; i < 50; i++) {
        double mid = 0.5 * (lo + hi);
        if (eerl__gpu_active_w(g, ph, mid) > g->cap_w)
            hi = mid;
        else
            lo = mid;
    }
    if (ret_capped)
        *ret_capped = 1;
    return lo;
}

static double roof(const struct eerl__phase_phys *ph, double fm, double f)
{
    return pow(1 + pow(ph->r * fm / f, ROOFLINE_K), 1 / ROOFLINE_K);
}

double eerl__phase_time_factor(const struct eerl__gpu *g, const struct eerl__phase_phys *ph,
                               double f)
{
    double fm = g->fmax;

    return ph->b + (1 - ph->b) * roof(ph, fm, f) / roof(ph, fm, fm);
}

int eerl__gpu_clock_ok(const struct eerl__gpu *g, unsigned mhz)
{
    unsigned i;

    for (i = 0; i < g->n_clocks; i++)
        if (g->clocks[i] == mhz)
            return 1;
    return 0;
}

int eerl__gpu_set_clocks(struct eerl__gpu *g, unsigned top, unsigned hi, unsigned lo, unsigned step)
{
    unsigned n = 0, c;

    if (!step || hi > top || lo > hi || lo == 0)
        return EERL_EINVAL;
    if (top != hi)
        g->clocks[n++] = top;
    for (c = hi; c >= lo; c -= step) {
        if (n >= EERL__TWIN_MAX_CLOCKS)
            return EERL_EOVERFLOW;
        g->clocks[n++] = c;
        if (c < step)
            break;
    }
    g->n_clocks = n;
    g->fmax = top;
    return 0;
}
