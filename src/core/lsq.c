/* Owns eerl__lsq_solve: pivoted Householder QR least squares for tiny p. Pivoting on the largest
 * remaining column norm makes rank deficiency visible on the diagonal of R, where it is cut off,
 * instead of being divided by in normal equations. */
#include <math.h>

#include "eerl/error.h"
#include "core/lsq.h"

static double col_norm2(const double *c, size_t from, size_t n)
{
    double s = 0;
    size_t i;

    for (i = from; i < n; i++)
        s += c[i] * c[i];
    return s;
}

int eerl__lsq_solve(double *X, size_t n, size_t p, double *y, double rtol, double *beta,
                    unsigned *ret_rank)
{
    size_t perm[EERL__LSQ_PMAX], k, j, i, rank = 0, kmax;
    double b[EERL__LSQ_PMAX], first = 0;

    if (!X || !y || !beta || n == 0 || p == 0 || p > EERL__LSQ_PMAX || !(rtol >= 0))
        return EERL_EINVAL;
    for (i = 0; i < n * p; i++)
        if (!isfinite(X[i]))
            return EERL_EINVAL;
    for (i = 0; i < n; i++)
        if (!isfinite(y[i]))
            return EERL_EINVAL;
    for (j = 0; j < p; j++)
        perm[j] = j;
    kmax = p < n ? p : n;
    for (k = 0; k < kmax; k++) {
        double best = -1, alpha, vnorm2, nrm;
        size_t bj = k;
        double *v;

        for (j = k; j < p; j++) {
            double s = col_norm2(X + j * n, k, n);
            if (s > best) {
                best = s;
                bj = j;
            }
        }
        nrm = sqrt(best);
        if (k == 0)
            first = nrm;
        if (nrm <= 0 || nrm <= rtol * first)
            break;
        if (bj != k) {
            size_t t = perm[k];
            perm[k] = perm[bj];
            perm[bj] = t;
            for (i = 0; i < n; i++) {
                double x = X[k * n + i];
                X[k * n + i] = X[bj * n + i];
                X[bj * n + i] = x;
            }
        }
        v = X + k * n;
        alpha = v[k] >= 0 ? -nrm : nrm;
        v[k] -= alpha;
        vnorm2 = col_norm2(v, k, n);
        if (vnorm2 > 0) {
            for (j = k + 1; j < p; j++) {
                double *c = X + j * n, d = 0;
                for (i = k; i < n; i++)
                    d += v[i] * c[i];
                d = 2 * d / vnorm2;
                for (i = k; i < n; i++)
                    c[i] -= d * v[i];
            }
            {
                double d = 0;
                for (i = k; i < n; i++)
                    d += v[i] * y[i];
                d = 2 * d / vnorm2;
                for (i = k; i < n; i++)
                    y[i] -= d * v[i];
            }
        }
        /* R's diagonal entry; the rest of column k below the diagonal is no longer needed. */
        v[k] = alpha;
        rank++;
    }
    /* Back substitution on the leading rank x rank block of R. */
    for (k = rank; k-- > 0;) {
        double s = y[k];
        for (j = k + 1; j < rank; j++)
            s -= X[j * n + k] * b[j];
        b[k] = s / X[k * n + k];
    }
    for (j = 0; j < p; j++)
        beta[j] = 0;
    for (k = 0; k < rank; k++)
        beta[perm[k]] = isfinite(b[k]) ? b[k] : 0;
    if (ret_rank)
        *ret_rank = (unsigned)rank;
    return 0;
}
