/* Phase groups beyond two (issue 9 item 5): a synthetic PPO-like colocated stream with three
 * groups, each with its own knee (generation, training, and a critic that runs in the "other"
 * part of the update). The eerl strategy with n_groups 3 searches a clock for the critic too and
 * locks within the allowance with more saving than when the critic is left to the governor
 * (n_groups 2); names are checked; the paper's strategies refuse more than two groups. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/core.h"
#include "eerl/error.h"

static const double knee[3] = {1400, 1200, 1000}, base_s[3] = {40, 30, 20};
static const double dyn_w[3] = {400, 500, 450};

static double clk(unsigned mhz)
{
    return mhz ? (double)mhz : 1980.0;
}

static uint64_t rng_state;

static double normal(void)
{
    double u, v;
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    u = ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    v = ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Time and energy of group g's phase at clock mhz for work w (1 = nominal); 8 GPUs. */
static void phase(int g, unsigned mhz, double w, double *t, double *e)
{
    double c = clk(mhz), slow = c >= knee[g] ? 1.0 : knee[g] / c, f = c / 1980.0;
    *t = base_s[g] * w * slow;
    *e = *t * 8 * (150 + dyn_w[g] * f * f);
}

static eerl_obs step(uint64_t u, const eerl_setting *s, double noise, double *true_t)
{
    eerl_obs o;
    double w = 1.0 + 0.08 * normal(), t, e, tt = 0;
    static const eerl_phase ph[3] = {EERL_PHASE_GEN, EERL_PHASE_TRAIN, EERL_PHASE_OTHER};
    int g;

    memset(&o, 0, sizeof(o));
    o.update = u;
    o.gen_tokens = 512 * 1500 * w;
    o.valid_tokens = 0.95 * o.gen_tokens;
    o.longest_tokens = 3000 * w;
    o.policy_age = 0;
    for (g = 0; g < 3; g++) {
        phase(g, s->mhz[g], w, &t, &e);
        tt += t;
        t *= exp(noise * normal());
        o.phase_time_s[ph[g]] = t;
        o.phase_energy_j[ph[g]] = e;
        o.time_s += t;
        o.energy_j += e;
    }
    o.setting = *s;
    *true_t = tt;
    return o;
}

struct res {
    int locked;
    eerl_setting lock;
    double loss, e_ratio;
};

static void run(unsigned n_groups, unsigned n, uint64_t seed, struct res *r)
{
    unsigned clocks[200], i;
    size_t nc = 0;
    eerl_ctl_config c;
    eerl_ctl *ctl = NULL;
    eerl_setting st, gov;
    eerl_event ev[64];
    double tg = 0, tc = 0, eg = 0, ec = 0;

    for (i = 1980; i >= 210; i -= 15)
        clocks[nc++] = i;
    memset(r, 0, sizeof(*r));
    memset(&gov, 0, sizeof(gov));
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &c);
    c.strategy = EERL_STRATEGY_EERL;
    c.n_groups = n_groups;
    snprintf(c.group_names[2], sizeof(c.group_names[2]), "critic");
    c.expected_updates = n;
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, nc, 1980, &ctl), 0);
    eerl_ctl_setting(ctl, &st);
    rng_state = seed;
    for (i = 1; i <= n; i++) {
        double t_true, tgv, ggv, e1, e2, t1;
        eerl_obs o = step(i, &st, 0.01, &t_true);
        size_t k, m;
        int g;

        for (g = 0, tgv = 0, ggv = 0; g < 3; g++) {
            phase(g, 0, 1.0, &t1, &e1);
            tgv += t1;
            ggv += e1;
            phase(g, st.mhz[g], 1.0, &t1, &e2);
            tc += t1;
            ec += e2;
        }
        tg += tgv;
        eg += ggv;
        assert_int_equal(eerl_ctl_observe(ctl, &o, &st), 0);
        if (n_groups == 2)
            assert_int_equal(st.mhz[2], 0);
        while ((m = eerl_ctl_events(ctl, ev, 64)) > 0)
            for (k = 0; k < m; k++) {
                if (getenv("EERL_TEST_VERBOSE"))
                    printf("u%llu %s %s\n", (unsigned long long)ev[k].update,
                           eerl_event_kind_name(ev[k].kind), ev[k].reason);
                if (ev[k].kind == EERL_EV_LOCK && !r->locked) {
                    r->locked = 1;
                    r->lock = ev[k].candidate;
                }
            }
    }
    r->loss = 1 - tg / tc;
    r->e_ratio = ec / eg;
    eerl_ctl_free(ctl);
}

static void test_three_groups_searched(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 3; seed++) {
        struct res two, three;

        run(2, 150, seed, &two);
        run(3, 150, seed, &three);
        if (getenv("EERL_TEST_VERBOSE"))
            printf("seed %llu: 2 groups lock %u/%u/%u loss %.4f e %.4f; 3 groups lock %u/%u/%u "
                   "loss %.4f e %.4f\n",
                   (unsigned long long)seed, two.lock.mhz[0], two.lock.mhz[1], two.lock.mhz[2],
                   two.loss, two.e_ratio, three.lock.mhz[0], three.lock.mhz[1], three.lock.mhz[2],
                   three.loss, three.e_ratio);
        assert_true(two.locked && three.locked);
        assert_int_equal(two.lock.mhz[2], 0);
        /* The critic's clock is searched: its knee is at 1000 MHz, so it comes well down. */
        assert_true(three.lock.mhz[2] != 0 && three.lock.mhz[2] < 1700);
        assert_true(three.loss <= 0.02 && two.loss <= 0.02);
        assert_true(three.e_ratio < two.e_ratio - 0.02);
    }
}

static void test_group_config_errors(void **state)
{
    unsigned clocks[] = {1980, 1500, 1000};
    eerl_ctl_config c;
    eerl_ctl *ctl = NULL;
    char why[200];

    (void)state;
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &c);
    assert_string_equal(c.group_names[0], "generation");
    assert_string_equal(c.group_names[1], "training");
    c.n_groups = 3;
    c.strategy = EERL_STRATEGY_PAPER;
    assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "n_groups 3: strategy paper"));
    c.strategy = EERL_STRATEGY_EERL;
    assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), 0);
    c.n_groups = 5;
    assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "n_groups 5"));
    c.n_groups = 3;
    snprintf(c.group_names[2], sizeof(c.group_names[2]), "training");
    assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "'training' is declared twice"));
    c.group_names[2][0] = '\0';
    assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "group_names[2]"));
    /* In-flight, eerl runs the two-pool block machine. */
    eerl_ctl_config_default(EERL_MODE_INFLIGHT, &c);
    c.strategy = EERL_STRATEGY_EERL;
    c.n_groups = 3;
    assert_int_equal(eerl_ctl_new(EERL_MODE_INFLIGHT, &c, clocks, 3, 1980, &ctl), EERL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_groups_searched),
        cmocka_unit_test(test_group_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
