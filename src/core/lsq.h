/* Least squares for the governor predictor: Householder QR with column pivoting, small and
 * careful. A column that adds nothing beyond the ones before it (a constant, or a copy of another)
 * is dropped and gets a 0 coefficient, never NaN. Owns no memory. */
#ifndef EERL_CORE_LSQ_H
#define EERL_CORE_LSQ_H

#include <stddef.h>

#define EERL__LSQ_PMAX 8

/* Minimizes ||X b - y||. X is n x p, column-major (column j at X + j*n), p <= EERL__LSQ_PMAX;
 * X and y are overwritten. beta receives p coefficients (0 for dropped columns), ret_rank the
 * number of columns kept. rtol: a column is dropped when its remaining norm is at most rtol times
 * the first pivot's (1e-9 is a good value). Returns 0 or EERL_EINVAL (n == 0, p out of range, a
 * non-finite entry). */
int eerl__lsq_solve(double *X, size_t n, size_t p, double *y, double rtol, double *beta,
                    unsigned *ret_rank);

#endif
