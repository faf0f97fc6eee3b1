/* The model proposer (src/core/proposer_model.c) on synthetic trial data: per group, phase time
 * and energy ratios drawn from a roofline-shaped time (flat near the peak, rising below a knee)
 * and a power that falls with the clock, with per-update noise from a fixed-seed generator (the
 * same numbers every run). Checks: the fit passes through 1 at the governor and recovers the
 * curves at the clocks tried; the proposal stays within the loss it is given and comes within
 * half a point of the true best energy on the same grid; avoided settings and the clock range
 * are honoured; the fit is monotone and continues its last slopes below the lowest clock; a
 * power-capped phase with a voltage knee is put at the knee; forgetting lets a moved curve win;
 * overlapped updates charge only the later pool; no work is an error, not a guess; kept updates
 * read again against a refitted predictor give the points that predictor reads. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/error.h"
#include "core/predictor.h"
#include "core/phase_model.h"

#define PEAK 1980u
#define assert_near(a, b, tol) assert_true(fabs((a) - (b)) <= (tol))

static uint64_t rng_state;

static double uniform(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}

static double gauss(void)
{
    return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform());
}

/* The truth: phase time ratio and power ratio at clock f for a phase of compute share r. */
struct truth {
    double r, b;  /* roofline ratio, share not following the clock */
    double pstat; /* share of power that does not follow the clock */
};

static double roof(double r, double f)
{
    return pow(1 + pow(r * PEAK / f, 3), 1.0 / 3);
}

static double t_true(const struct truth *t, double f)
{
    return t->b + (1 - t->b) * roof(t->r, f) / roof(t->r, PEAK);
}

static double e_true(const struct truth *t, double f)
{
    double v = 0.7 + 0.3 * f / PEAK; /* voltage falls with the clock */
    return t_true(t, f) * (t->pstat + (1 - t->pstat) * v * v * f / PEAK);
}

static const struct truth GEN = {0.55, 0.05, 0.45};   /* memory-bound: flat, then rising */
static const struct truth TRAIN = {0.95, 0.05, 0.40}; /* compute-bound: rising at once */

static unsigned clocks[120];
static size_t n_clocks;

static void make_clocks(void)
{
    unsigned c;

    n_clocks = 0;
    for (c = PEAK; c >= 600; c -= 15)
        clocks[n_clocks++] = c;
}

static const struct eerl__pm_work WORK = {{6.0, 4.0}, {6000, 4400}, 0.5, 300};

static double true_loss(const unsigned *c, int overlap)
{
    const struct eerl__pm_work *w = &WORK;
    double a = t_true(&GEN, c[0]) * w->t[0], b = t_true(&TRAIN, c[1]) * w->t[1];

    if (overlap)
        return ((a > b ? a : b) + w->t_rest) /
                   ((w->t[0] > w->t[1] ? w->t[0] : w->t[1]) + w->t_rest) -
               1;
    return (a + b + w->t_rest) / (w->t[0] + w->t[1] + w->t_rest) - 1;
}

static double true_energy(const unsigned *c)
{
    const struct eerl__pm_work *w = &WORK;

    return (e_true(&GEN, c[0]) * w->e[0] + e_true(&TRAIN, c[1]) * w->e[1] + w->e_rest) /
           (w->e[0] + w->e[1] + w->e_rest);
}

/* n updates at clocks c with per-update noise sd on each ratio. */
static void feed(struct eerl__pm *m, const unsigned *c, unsigned n, double sd)
{
    unsigned i;

    for (i = 0; i < n; i++) {
        double t[2], e[2];
        t[0] = t_true(&GEN, c[0]) * (1 + sd * gauss());
        t[1] = t_true(&TRAIN, c[1]) * (1 + sd * gauss());
        e[0] = e_true(&GEN, c[0]) * (1 + sd * gauss());
        e[1] = e_true(&TRAIN, c[1]) * (1 + sd * gauss());
        eerl__pm_add(m, c, t, e);
        eerl__pm_add_work(m, &WORK);
    }
}

static void basic_ask(struct eerl__pm_ask *a, double max_loss)
{
    memset(a, 0, sizeof(*a));
    make_clocks();
    a->clocks = clocks;
    a->n_clocks = n_clocks;
    a->lo[0] = a->lo[1] = 600;
    a->hi[0] = a->hi[1] = PEAK;
    a->max_loss = max_loss;
    a->kappa = 1;
}

/* A search's worth of trials: the fit recovers both curves where they were measured. */
static void test_fit_recovers_curves(void **unused)
{
    static const unsigned tried[][2] = {{PEAK, 1620}, {1800, 1620}, {1800, 1440},
                                        {1710, 1350}, {1800, 1260}, {1620, 1530}};
    struct eerl__pm m;
    size_t i;
    int g;

    (void)unused;
    rng_state = 1;
    eerl__pm_init(&m, EERL__LAYOUT_SEQ, PEAK, 1.0);
    for (i = 0; i < sizeof(tried) / sizeof(tried[0]); i++)
        feed(&m, tried[i], 12, 0.01);
    eerl__pm_fit(&m);
    assert_near(eerl__pm_time(&m, 0, PEAK, NULL), 1.0, 1e-12);
    assert_near(eerl__pm_energy(&m, 1, PEAK), 1.0, 1e-12);
    for (g = 0; g < 2; g++) {
        const struct truth *t = g ? &TRAIN : &GEN;
        for (i = 0; i < sizeof(tried) / sizeof(tried[0]); i++) {
            unsigned f = tried[i][g];
            assert_near(eerl__pm_time(&m, g, f, NULL), t_true(t, f), 0.008);
            assert_near(eerl__pm_energy(&m, g, f), e_true(t, f), 0.008);
        }
    }
}

/* The proposal keeps within the loss it was given (true loss, a little noise allowed) and is
 * within half a point of energy of the true best on the grid between the clocks tried. */
static void test_propose_near_true_best(void **unused)
{
    static const unsigned tried[][2] = {{PEAK, 1620}, {1800, 1620}, {1800, 1440},
                                        {1710, 1350}, {1800, 1260}, {1620, 1530}};
    const double budgets[] = {0.01, 0.017, 0.03};
    struct eerl__pm m;
    struct eerl__pm_ask a;
    struct eerl__pm_pred p;
    unsigned out[2], c[2];
    size_t i, j, k;

    (void)unused;
    rng_state = 7;
    eerl__pm_init(&m, EERL__LAYOUT_SEQ, PEAK, 1.0);
    for (i = 0; i < sizeof(tried) / sizeof(tried[0]); i++)
        feed(&m, tried[i], 12, 0.01);
    eerl__pm_fit(&m);
    for (k = 0; k < 3; k++) {
        double best = 1;
        basic_ask(&a, budgets[k]);
        a.lo[0] = 1620; /* within the clocks tried: between them the fit interpolates */
        a.lo[1] = 1260;
        assert_int_equal(eerl__pm_propose(&m, &a, out, &p), 0);
        assert_true(p.loss + a.kappa * p.loss_sd <= budgets[k] + 1e-12);
        assert_true(true_loss(out, 0) <= budgets[k] + 0.003);
        for (i = 0; i < n_clocks; i++)
            for (j = 0; j < n_clocks; j++) {
                c[0] = clocks[i];
                c[1] = clocks[j];
                if (c[0] >= a.lo[0] && c[1] >= a.lo[1] && true_loss(c, 0) <= budgets[k] &&
                    true_energy(c) < best)
                    best = true_energy(c);
            }
        assert_true(true_energy(out) <= best + 0.005);
        assert_true(true_energy(out) < 1);
    }
}

/* The range and the avoided settings are honoured; a budget nothing meets is ENODATA. */
static void test_propose_constraints(void **unused)
{
    static const unsigned tried[][2] = {{1800, 1620}, {1800, 1440}, {1710, 1350}};
    const unsigned avoid[1][2] = {{1800, 1440}};
    struct eerl__pm m;
    struct eerl__pm_ask a;
    unsigned out[2];
    size_t i;

    (void)unused;
    rng_state = 3;
    eerl__pm_init(&m, EERL__LAYOUT_SEQ, PEAK, 1.0);
    for (i = 0; i < 3; i++)
        feed(&m, tried[i], 10, 0.005);
    eerl__pm_fit(&m);
    basic_ask(&a, 0.08); /* training is compute-bound: 1700 MHz costs it about 16% */
    a.lo[0] = 1700;
    a.lo[1] = 1400;
    a.hi[1] = 1700;
    assert_int_equal(eerl__pm_propose(&m, &a, out, NULL), 0);
    assert_true(out[0] >= 1700 && out[1] >= 1400 && out[1] <= 1700);
    a.avoid = avoid;
    a.n_avoid = 1;
    assert_int_equal(eerl__pm_propose(&m, &a, out, NULL), 0);
    assert_true(out[0] > 1800 || out[1] > 1440);
    basic_ask(&a, -0.01); /* faster than the governor: nothing */
    a.hi[0] = a.hi[1] = 1900;
    assert_int_equal(eerl__pm_propose(&m, &a, out, NULL), EERL_ENODATA);
    assert_int_equal(out[0], PEAK);
}

/* The fit is monotone: a noisy dip (time lower at a lower clock, power higher) is pooled with
 * its neighbour; the governor's 1 anchors it; below the lowest clock tried the last segment's
 * slopes continue, never turning back. */
static void test_monotone(void **unused)
{
    const unsigned hi[2] = {1800, 1800}, lo[2] = {1620, 1620};
    const double t_hi[2] = {1.02, 1.02}, t_lo[2] = {1.01, 1.05};
    const double e_hi[2] = {0.95, 0.95}, e_lo[2] = {0.99, 0.90};
    struct eerl__pm m;
    unsigned i;
    double t0, t1, t2;

    (void)unused;
    eerl__pm_init(&m, EERL__LAYOUT_SEQ, PEAK, 1.0);
    for (i = 0; i < 4; i++) {
        eerl__pm_add(&m, hi, t_hi, e_hi);
        eerl__pm_add(&m, lo, t_lo, e_lo);
    }
    eerl__pm_fit(&m);
    assert_near(eerl__pm_time(&m, 0, PEAK, NULL), 1.0, 1e-12);
    /* group 0: time 1.02 then 1.01 is pooled to 1.015 at both */
    assert_near(eerl__pm_time(&m, 0, 1800, NULL), 1.015, 1e-9);
    assert_near(eerl__pm_time(&m, 0, 1620, NULL), 1.015, 1e-9);
    /* and power: 0.95 / 1.02 then 0.99 / 1.01 rising as the clock falls: pooled too */
    assert_true(eerl__pm_energy(&m, 0, 1620) / eerl__pm_time(&m, 0, 1620, NULL) <=
                eerl__pm_energy(&m, 0, 1800) / eerl__pm_time(&m, 0, 1800, NULL) + 1e-12);
    /* group 1: halfway between 1800 and 1620 the time is halfway */
    assert_near(eerl__pm_time(&m, 1, 1710, NULL), 1.035, 1e-9);
    /* below 1620 the slope from 1800 continues: 0.03 per 180 MHz */
    t0 = eerl__pm_time(&m, 1, 1620, NULL);
    t1 = eerl__pm_time(&m, 1, 1530, NULL);
    t2 = eerl__pm_time(&m, 0, 1530, NULL);
    assert_near(t1 - t0, 0.015, 1e-9);
    assert_near(t2, 1.015, 1e-9); /* group 0's last segment is flat: it stays flat */
}

/* An H100-like training phase: held by the power cap (flat time, flat power) down to 1410 MHz,
 * power falling steeply from there to the voltage knee at 1320, then only with the clock while
 * time rises as 1 / f. Tried on a 30 MHz ladder, the proposal puts training at the knee, where
 * a few-parameter curve through the same points smooths the drop away. */
static double cap_t(double f)
{
    return f >= 1410 ? 1.0 : 1410 / f;
}

static double cap_p(double f)
{
    if (f >= 1410)
        return 1.0;
    if (f >= 1320)
        return 1.0 - 0.25 * (1410 - f) / 90;
    return 0.75 - 0.3 * (1320 - f) / PEAK;
}

static void test_knee(void **unused)
{
    struct eerl__pm m;
    struct eerl__pm_ask a;
    struct eerl__pm_pred p;
    unsigned f, out[2];

    (void)unused;
    eerl__pm_init(&m, EERL__LAYOUT_SEQ, PEAK, 1.0);
    for (f = 1500; f >= 1200; f -= 30) {
        const unsigned c[2] = {PEAK, f};
        const double t[2] = {1, cap_t(f)}, e[2] = {1, cap_t(f) * cap_p(f)};
        unsigned i;
        for (i = 0; i < 6; i++) {
            eerl__pm_add(&m, c, t, e);
            eerl__pm_add_work(&m, &WORK);
        }
    }
    eerl__pm_fit(&m);
    basic_ask(&a, 0.05);
    a.hi[0] = a.lo[0] = PEAK;
    a.lo[1] = 1200;
    assert_int_equal(eerl__pm_propose(&m, &a, out, &p), 0);
    assert_int_equal(out[1], 1320);
}

/* With forgetting, a curve that moved (the work got more compute-bound) takes over the fit. */
static void test_forgetting(void **unused)
{
    const unsigned c[2] = {1800, 1440};
    struct eerl__pm m;
    unsigned i;
    double t[2], e[2];

    (void)unused;
    eerl__pm_init(&m, EERL__LAYOUT_SEQ, PEAK, 1 - 1.0 / 50);
    for (i = 0; i < 100; i++) {
        t[0] = 1.01;
        t[1] = 1.05;
        e[0] = e[1] = 0.9;
        eerl__pm_add(&m, c, t, e);
        eerl__pm_add_work(&m, &WORK);
    }
    for (i = 0; i < 200; i++) {
        t[1] = 1.10;
        eerl__pm_add(&m, c, t, e);
    }
    eerl__pm_fit(&m);
    assert_near(eerl__pm_time(&m, 1, 1440, NULL), 1.10, 0.002);
}

/* A governor predictor that predicts the same parts for any work (s, J). */
static void flat_pred(struct eerl__pred *p, double t_gen, double t_train)
{
    memset(p, 0, sizeof(*p));
    p->layout = EERL__LAYOUT_SEQ;
    p->t_gen.fitted = p->t_train.fitted = p->e_gen.fitted = p->e_train.fitted = 1;
    p->t_gen.b0 = log(t_gen);
    p->t_train.b0 = log(t_train);
    p->e_gen.b0 = log(1000 * t_gen);
    p->e_train.b0 = log(1000 * t_train);
    p->rest_t = 0.5;
    p->ready = 1;
}

static double point_weight(const struct eerl__pm *m, int g, unsigned mhz)
{
    unsigned i;

    for (i = 0; i < m->g[g].n_pt; i++)
        if (m->g[g].pt[i].mhz == mhz)
            return m->g[g].pt[i].w;
    return 0;
}

/* The kept updates read again: points taken against a predictor that ran short
 * of the governor (9.5 s and 5.5 s for work the governor does in 10 s and 5 s) read the measured
 * 11 s and 6 s as ratios 1.158 and 1.091; read again against the refitted one they are the true
 * 1.10 and 1.20, and with the probes' correction on top (+10% on generation) 1.00. Reading them
 * again against the same predictor changes nothing, weights included; the oldest updates beyond
 * the kept EERL__PM_HIST fall out. */
static void test_reread_follows_the_refitted_reference(void **unused)
{
    static struct eerl__pm_hist h;
    static const unsigned at[2] = {1500, 1200}, early[2] = {1350, 1050};
    struct eerl__pred stale, fresh;
    struct eerl__pm m, again;
    struct eerl__pm_corr none = {{0, 0}, {0, 0}}, probes = {{0.10, 0}, {0, 0}};
    struct eerl__parts meas;
    eerl_obs o;
    unsigned i;

    (void)unused;
    memset(&h, 0, sizeof(h));
    memset(&o, 0, sizeof(o));
    memset(&meas, 0, sizeof(meas));
    o.gen_tokens = o.valid_tokens = 1e5;
    o.longest_tokens = 2048;
    meas.t_gen = 11;
    meas.t_train = 6;
    meas.e_gen = 11 * 900;
    meas.e_train = 6 * 900;
    flat_pred(&stale, 9.5, 5.5);
    flat_pred(&fresh, 10, 5);
    eerl__pm_init(&m, EERL__LAYOUT_SEQ, PEAK, 1 - 1.0 / 400);
    for (i = 0; i < 40; i++) {
        struct eerl__parts p;

        eerl__pred_predict(&stale, &o, &p);
        eerl__pm_take(&m, at, &meas, &p, &none);
        eerl__pm_hist_add(&h, at, &o, &meas);
    }
    eerl__pm_fit(&m);
    assert_near(eerl__pm_time(&m, 0, 1500, NULL), 11 / 9.5, 1e-9);
    assert_near(eerl__pm_time(&m, 1, 1200, NULL), 6 / 5.5, 1e-9);
    assert_int_equal(m.n_work, EERL__PM_WORK);

    again = m;
    eerl__pm_reread(&again, &h, &stale, &none);
    eerl__pm_fit(&again);
    assert_near(point_weight(&again, 0, 1500), point_weight(&m, 0, 1500), 1e-12);
    assert_near(eerl__pm_time(&again, 0, 1500, NULL), 11 / 9.5, 1e-9);
    assert_near(eerl__pm_energy(&again, 1, 1200), eerl__pm_energy(&m, 1, 1200), 1e-12);

    eerl__pm_reread(&m, &h, &fresh, &none);
    eerl__pm_fit(&m);
    assert_near(eerl__pm_time(&m, 0, 1500, NULL), 1.10, 1e-9);
    assert_near(eerl__pm_time(&m, 1, 1200, NULL), 1.20, 1e-9);
    assert_near(eerl__pm_energy(&m, 0, 1500), 0.99, 1e-9);
    assert_near(m.work[0].t[0], 10, 1e-9);
    eerl__pm_reread(&m, &h, &fresh, &probes);
    eerl__pm_fit(&m);
    assert_near(eerl__pm_time(&m, 0, 1500, NULL), 1.00, 1e-9);
    assert_near(eerl__pm_time(&m, 1, 1200, NULL), 1.20, 1e-9);

    /* A full ring: the 40 updates at 1500 MHz are older than the last EERL__PM_HIST. */
    for (i = 0; i < EERL__PM_HIST; i++)
        eerl__pm_hist_add(&h, early, &o, &meas);
    assert_int_equal(h.n, EERL__PM_HIST);
    eerl__pm_reread(&m, &h, &fresh, &none);
    assert_true(point_weight(&m, 0, 1500) == 0);
    assert_true(point_weight(&m, 0, 1350) > 1);
}

/* Overlapped updates (drained): slowing the pool that arrives first costs nothing until it
 * becomes the later one. */
static void test_overlap_layout(void **unused)
{
    const unsigned c[2] = {PEAK, 1440};
    struct eerl__pm m;
    struct eerl__pm_pred p;
    double t[2] = {1.0, 1.3}, e[2] = {1.0, 0.8};
    unsigned i, q[2] = {PEAK, 1440};

    (void)unused;
    eerl__pm_init(&m, EERL__LAYOUT_OVERLAP, PEAK, 1.0);
    assert_int_equal(eerl__pm_predict(&m, q, &p), EERL_ENODATA);
    for (i = 0; i < 10; i++) {
        eerl__pm_add(&m, c, t, e);
        eerl__pm_add_work(&m, &WORK); /* generation 6 s, training 4 s: training waits 2 s */
    }
    eerl__pm_fit(&m);
    assert_int_equal(eerl__pm_predict(&m, q, &p), 0);
    assert_near(p.loss, 0.0, 1e-9); /* 4 s x 1.3 = 5.2 s, still before generation */
    assert_true(p.energy < 1);
    for (i = 0; i < 10; i++) {
        t[1] = 1.8;
        eerl__pm_add(&m, c, t, e);
    }
    eerl__pm_fit(&m);
    assert_int_equal(eerl__pm_predict(&m, q, &p), 0);
    /* 4 s x 1.55 (the two stretches' mean) = 6.2 s: now training is the later pool */
    assert_near(p.loss, 0.2 / 6.5, 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_recovers_curves),
        cmocka_unit_test(test_propose_near_true_best),
        cmocka_unit_test(test_propose_constraints),
        cmocka_unit_test(test_monotone),
        cmocka_unit_test(test_knee),
        cmocka_unit_test(test_forgetting),
        cmocka_unit_test(test_overlap_layout),
        cmocka_unit_test(test_reread_follows_the_refitted_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
