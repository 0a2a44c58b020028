#pragma once
// Levenberg–Marquardt as MINPACK's lmdif runs it (and so scipy's leastsq/curve_fit): forward-
// difference Jacobian (fdjac2), QR with column pivoting (qrfac), the trust-region parameter by
// lmpar/qrsolv, scaling by the Jacobian's column norms (mode 1), MINPACK's norm (enorm) and its
// convergence tests and function-evaluation count. Written for a handful of parameters: every
// n-sized quantity lives on the stack, and the m-sized buffers come from a workspace the caller
// reuses across fits, so a fit allocates nothing.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace perseus::lm {

struct Settings {
  double ftol = 1.49012e-08;  // scipy's defaults
  double xtol = 1.49012e-08;
  double gtol = 0.0;
  int maxfev = 50000;
  double factor = 100.0;
};

template <int N>
struct Result {
  std::array<double, N> x{};
  int info = 0;  // MINPACK's: 1..4 converged, 5 maxfev, 6..8 tolerances too small
  int nfev = 0;
  // R of the last Jacobian's pivoted QR (upper triangle, r[i][j] for i <= j) and the pivots:
  // what scipy turns into the covariance.
  std::array<std::array<double, N>, N> r{};
  std::array<int, N> ipvt{};
};

struct Workspace {
  std::vector<double> fvec, trial, column, fjac;  // fjac column-major, m x N
  void reserve(std::size_t m, int n) {
    fvec.resize(m);
    trial.resize(m);
    column.resize(m);
    fjac.resize(m * static_cast<std::size_t>(n));
  }
};

// MINPACK's Euclidean norm: sums small, intermediate and large components apart so that it
// neither overflows nor underflows.
inline double enorm(const double* x, std::size_t n) {
  constexpr double rdwarf = 3.834e-20, rgiant = 1.304e19;
  double s1 = 0, s2 = 0, s3 = 0, x1max = 0, x3max = 0;
  const double agiant = rgiant / static_cast<double>(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double xabs = std::fabs(x[i]);
    if (xabs > rdwarf && xabs < agiant) {
      s2 += xabs * xabs;
    } else if (xabs <= rdwarf) {
      if (xabs > x3max) {
        s3 = 1.0 + s3 * (x3max / xabs) * (x3max / xabs);
        x3max = xabs;
      } else if (xabs != 0.0) {
        s3 += (xabs / x3max) * (xabs / x3max);
      }
    } else if (xabs > x1max) {
      s1 = 1.0 + s1 * (x1max / xabs) * (x1max / xabs);
      x1max = xabs;
    } else {
      s1 += (xabs / x1max) * (xabs / x1max);
    }
  }
  if (s1 != 0.0) return x1max * std::sqrt(s1 + (s2 / x1max) / x1max);
  if (s2 != 0.0) {
    return s2 >= x3max ? std::sqrt(s2 * (1.0 + (x3max / s2) * (x3max * s3)))
                       : std::sqrt(x3max * ((s2 / x3max) + (x3max * s3)));
  }
  return x3max * std::sqrt(s3);
}

namespace detail {

template <int N>
using Square = std::array<std::array<double, N>, N>;  // s[i][j]: row i, column j

// Solves min |(A; D) x - (b; 0)| given A P = Q R: Givens rotations eliminate D (qrsolv). On
// return the strict lower triangle of r holds S's strict upper triangle, transposed.
template <int N>
void qrsolv(Square<N>& r, const std::array<int, N>& ipvt, const std::array<double, N>& diag,
            const std::array<double, N>& qtb, std::array<double, N>& x, std::array<double, N>& sdiag) {
  std::array<double, N> wa{};
  for (int j = 0; j < N; ++j) {
    for (int i = j; i < N; ++i) r[i][j] = r[j][i];
    x[j] = r[j][j];
    wa[j] = qtb[j];
  }
  for (int j = 0; j < N; ++j) {
    const int l = ipvt[j];
    if (diag[l] != 0.0) {
      for (int k = j; k < N; ++k) sdiag[k] = 0.0;
      sdiag[j] = diag[l];
      double qtbpj = 0.0;
      for (int k = j; k < N; ++k) {
        if (sdiag[k] == 0.0) continue;
        double sin, cos;
        if (std::fabs(r[k][k]) < std::fabs(sdiag[k])) {
          const double cotan = r[k][k] / sdiag[k];
          sin = 0.5 / std::sqrt(0.25 + 0.25 * cotan * cotan);
          cos = sin * cotan;
        } else {
          const double tan = sdiag[k] / r[k][k];
          cos = 0.5 / std::sqrt(0.25 + 0.25 * tan * tan);
          sin = cos * tan;
        }
        r[k][k] = cos * r[k][k] + sin * sdiag[k];
        const double temp = cos * wa[k] + sin * qtbpj;
        qtbpj = -sin * wa[k] + cos * qtbpj;
        wa[k] = temp;
        for (int i = k + 1; i < N; ++i) {
          const double t = cos * r[i][k] + sin * sdiag[i];
          sdiag[i] = -sin * r[i][k] + cos * sdiag[i];
          r[i][k] = t;
        }
      }
    }
    sdiag[j] = r[j][j];
    r[j][j] = x[j];
  }
  int nsing = N;
  for (int j = 0; j < N; ++j) {
    if (sdiag[j] == 0.0 && nsing == N) nsing = j;
    if (nsing < N) wa[j] = 0.0;
  }
  for (int k = 0; k < nsing; ++k) {
    const int j = nsing - 1 - k;
    double sum = 0.0;
    for (int i = j + 1; i < nsing; ++i) sum += r[i][j] * wa[i];
    wa[j] = (wa[j] - sum) / sdiag[j];
  }
  for (int j = 0; j < N; ++j) x[ipvt[j]] = wa[j];
}

// The Levenberg–Marquardt parameter for trust radius delta (lmpar); x gets the step (negated).
template <int N>
void lmpar(Square<N>& r, const std::array<int, N>& ipvt, const std::array<double, N>& diag,
           const std::array<double, N>& qtb, double delta, double& par, std::array<double, N>& x) {
  constexpr double p1 = 0.1, p001 = 0.001;
  const double dwarf = std::numeric_limits<double>::min();
  std::array<double, N> wa1{}, wa2{}, sdiag{};
  int nsing = N;
  for (int j = 0; j < N; ++j) {
    wa1[j] = qtb[j];
    if (r[j][j] == 0.0 && nsing == N) nsing = j;
    if (nsing < N) wa1[j] = 0.0;
  }
  for (int k = 0; k < nsing; ++k) {
    const int j = nsing - 1 - k;
    wa1[j] /= r[j][j];
    const double temp = wa1[j];
    for (int i = 0; i < j; ++i) wa1[i] -= r[i][j] * temp;
  }
  for (int j = 0; j < N; ++j) x[ipvt[j]] = wa1[j];

  int iter = 0;
  for (int j = 0; j < N; ++j) wa2[j] = diag[j] * x[j];
  double dxnorm = enorm(wa2.data(), N);
  double fp = dxnorm - delta;
  if (fp <= p1 * delta) {
    par = 0.0;
    return;
  }
  double parl = 0.0;
  if (nsing >= N) {
    for (int j = 0; j < N; ++j) {
      const int l = ipvt[j];
      wa1[j] = diag[l] * (wa2[l] / dxnorm);
    }
    for (int j = 0; j < N; ++j) {
      double sum = 0.0;
      for (int i = 0; i < j; ++i) sum += r[i][j] * wa1[i];
      wa1[j] = (wa1[j] - sum) / r[j][j];
    }
    const double temp = enorm(wa1.data(), N);
    parl = ((fp / delta) / temp) / temp;
  }
  for (int j = 0; j < N; ++j) {
    double sum = 0.0;
    for (int i = 0; i <= j; ++i) sum += r[i][j] * qtb[i];
    wa1[j] = sum / diag[ipvt[j]];
  }
  const double gnorm = enorm(wa1.data(), N);
  double paru = gnorm / delta;
  if (paru == 0.0) paru = dwarf / std::min(delta, p1);
  par = std::max(par, parl);
  par = std::min(par, paru);
  if (par == 0.0) par = gnorm / dxnorm;
  for (;;) {
    ++iter;
    if (par == 0.0) par = std::max(dwarf, p001 * paru);
    const double root = std::sqrt(par);
    for (int j = 0; j < N; ++j) wa1[j] = root * diag[j];
    qrsolv<N>(r, ipvt, wa1, qtb, x, sdiag);
    for (int j = 0; j < N; ++j) wa2[j] = diag[j] * x[j];
    dxnorm = enorm(wa2.data(), N);
    const double previous = fp;
    fp = dxnorm - delta;
    if (std::fabs(fp) <= p1 * delta || (parl == 0.0 && fp <= previous && previous < 0.0) || iter == 10) break;
    for (int j = 0; j < N; ++j) {
      const int l = ipvt[j];
      wa1[j] = diag[l] * (wa2[l] / dxnorm);
    }
    for (int j = 0; j < N; ++j) {
      wa1[j] /= sdiag[j];
      const double temp = wa1[j];
      for (int i = j + 1; i < N; ++i) wa1[i] -= r[i][j] * temp;
    }
    const double temp = enorm(wa1.data(), N);
    const double parc = ((fp / delta) / temp) / temp;
    if (fp > 0.0) parl = std::max(parl, par);
    if (fp < 0.0) paru = std::min(paru, par);
    par = std::max(parl, par + parc);
  }
}

// Householder QR of the m x N column-major a with column pivoting (qrfac). On return a's upper
// triangle (above the diagonal) is R's, its lower part the Householder vectors; rdiag is R's
// diagonal, acnorm the original column norms.
template <int N>
void qrfac(double* a, std::size_t m, std::array<int, N>& ipvt, std::array<double, N>& rdiag,
           std::array<double, N>& acnorm) {
  const double epsmch = std::numeric_limits<double>::epsilon();
  std::array<double, N> wa{};
  auto col = [&](int j) { return a + static_cast<std::size_t>(j) * m; };
  for (int j = 0; j < N; ++j) {
    acnorm[j] = enorm(col(j), m);
    rdiag[j] = acnorm[j];
    wa[j] = rdiag[j];
    ipvt[j] = j;
  }
  const int minmn = static_cast<int>(std::min<std::size_t>(m, N));
  for (int j = 0; j < minmn; ++j) {
    int kmax = j;
    for (int k = j; k < N; ++k)
      if (rdiag[k] > rdiag[kmax]) kmax = k;
    if (kmax != j) {
      std::swap_ranges(col(j), col(j) + m, col(kmax));
      rdiag[kmax] = rdiag[j];
      wa[kmax] = wa[j];
      std::swap(ipvt[j], ipvt[kmax]);
    }
    double* aj = col(j);
    const std::size_t jj = static_cast<std::size_t>(j);
    double ajnorm = enorm(aj + jj, m - jj);
    if (ajnorm != 0.0) {
      if (aj[jj] < 0.0) ajnorm = -ajnorm;
      for (std::size_t i = jj; i < m; ++i) aj[i] /= ajnorm;
      aj[jj] += 1.0;
      for (int k = j + 1; k < N; ++k) {
        double* ak = col(k);
        double sum = 0.0;
        for (std::size_t i = jj; i < m; ++i) sum += aj[i] * ak[i];
        const double temp = sum / aj[jj];
        for (std::size_t i = jj; i < m; ++i) ak[i] -= temp * aj[i];
        if (rdiag[k] != 0.0) {
          const double ratio = ak[jj] / rdiag[k];
          rdiag[k] *= std::sqrt(std::max(0.0, 1.0 - ratio * ratio));
          if (0.05 * (rdiag[k] / wa[k]) * (rdiag[k] / wa[k]) <= epsmch) {
            rdiag[k] = enorm(ak + jj + 1, m - jj - 1);
            wa[k] = rdiag[k];
          }
        }
      }
    }
    rdiag[j] = -ajnorm;
  }
}

}  // namespace detail

// Minimizes sum_i f_i(x)^2 over x from x0, with residuals(x, out) filling out[0..m). m >= N.
template <int N, class Residuals>
Result<N> lmdif(Residuals&& residuals, std::size_t m, std::array<double, N> x0, Workspace& ws,
                const Settings& settings = {}) {
  using detail::Square;
  const double epsmch = std::numeric_limits<double>::epsilon();
  const double eps = std::sqrt(epsmch);  // scipy's epsfcn default: machine epsilon
  ws.reserve(m, N);
  double* fvec = ws.fvec.data();
  double* trial = ws.trial.data();
  double* column = ws.column.data();
  double* fjac = ws.fjac.data();

  Result<N> result;
  std::array<double, N>& x = result.x;
  x = x0;
  int& info = result.info;
  int& nfev = result.nfev;
  std::array<double, N> diag{}, qtf{}, rdiag{}, acnorm{}, step{}, wa2{}, wa3{};
  Square<N> r{};

  residuals(x, fvec);
  nfev = 1;
  double fnorm = enorm(fvec, m);
  double par = 0.0, delta = 0.0, xnorm = 0.0;
  int iter = 1;
  for (;;) {
    // Forward-difference Jacobian.
    for (int j = 0; j < N; ++j) {
      const double saved = x[j];
      double h = eps * std::fabs(saved);
      if (h == 0.0) h = eps;
      x[j] = saved + h;
      residuals(x, column);
      x[j] = saved;
      double* fj = fjac + static_cast<std::size_t>(j) * m;
      for (std::size_t i = 0; i < m; ++i) fj[i] = (column[i] - fvec[i]) / h;
    }
    nfev += N;
    detail::qrfac<N>(fjac, m, result.ipvt, rdiag, acnorm);
    if (iter == 1) {
      for (int j = 0; j < N; ++j) diag[j] = acnorm[j] == 0.0 ? 1.0 : acnorm[j];
      for (int j = 0; j < N; ++j) wa3[j] = diag[j] * x[j];
      xnorm = enorm(wa3.data(), N);
      delta = settings.factor * xnorm;
      if (delta == 0.0) delta = settings.factor;
    }
    // Q^T fvec's first N components; R into r.
    std::copy(fvec, fvec + m, trial);
    for (int j = 0; j < N; ++j) {
      double* fj = fjac + static_cast<std::size_t>(j) * m;
      const std::size_t jj = static_cast<std::size_t>(j);
      if (fj[jj] != 0.0) {
        double sum = 0.0;
        for (std::size_t i = jj; i < m; ++i) sum += fj[i] * trial[i];
        const double temp = -sum / fj[jj];
        for (std::size_t i = jj; i < m; ++i) trial[i] += fj[i] * temp;
      }
      fj[jj] = rdiag[j];
      qtf[j] = trial[jj];
    }
    for (int j = 0; j < N; ++j)
      for (int i = 0; i <= j; ++i) r[i][j] = fjac[static_cast<std::size_t>(j) * m + static_cast<std::size_t>(i)];
    result.r = r;

    double gnorm = 0.0;
    if (fnorm != 0.0) {
      for (int j = 0; j < N; ++j) {
        const int l = result.ipvt[j];
        if (acnorm[l] != 0.0) {
          double sum = 0.0;
          for (int i = 0; i <= j; ++i) sum += r[i][j] * (qtf[i] / fnorm);
          gnorm = std::max(gnorm, std::fabs(sum / acnorm[l]));
        }
      }
    }
    if (gnorm <= settings.gtol) info = 4;
    if (info != 0) return result;
    for (int j = 0; j < N; ++j) diag[j] = std::max(diag[j], acnorm[j]);

    for (;;) {
      detail::lmpar<N>(r, result.ipvt, diag, qtf, delta, par, step);
      for (int j = 0; j < N; ++j) {
        step[j] = -step[j];
        wa2[j] = x[j] + step[j];
        wa3[j] = diag[j] * step[j];
      }
      const double pnorm = enorm(wa3.data(), N);
      if (iter == 1) delta = std::min(delta, pnorm);
      residuals(wa2, trial);
      ++nfev;
      const double fnorm1 = enorm(trial, m);
      double actred = -1.0;
      if (0.1 * fnorm1 < fnorm) actred = 1.0 - (fnorm1 / fnorm) * (fnorm1 / fnorm);
      for (int j = 0; j < N; ++j) {
        wa3[j] = 0.0;
        const double temp = step[result.ipvt[j]];
        for (int i = 0; i <= j; ++i) wa3[i] += r[i][j] * temp;
      }
      const double temp1 = enorm(wa3.data(), N) / fnorm;
      const double temp2 = (std::sqrt(par) * pnorm) / fnorm;
      const double prered = temp1 * temp1 + temp2 * temp2 / 0.5;
      const double dirder = -(temp1 * temp1 + temp2 * temp2);
      const double ratio = prered != 0.0 ? actred / prered : 0.0;
      if (ratio <= 0.25) {
        double temp = actred >= 0.0 ? 0.5 : 0.5 * dirder / (dirder + 0.5 * actred);
        if (0.1 * fnorm1 >= fnorm || temp < 0.1) temp = 0.1;
        delta = temp * std::min(delta, pnorm / 0.1);
        par /= temp;
      } else if (par == 0.0 || ratio >= 0.75) {
        delta = pnorm / 0.5;
        par *= 0.5;
      }
      if (ratio >= 1e-4) {
        x = wa2;
        for (int j = 0; j < N; ++j) wa2[j] = diag[j] * x[j];
        std::copy(trial, trial + m, fvec);
        xnorm = enorm(wa2.data(), N);
        fnorm = fnorm1;
        ++iter;
      }
      const bool small_reduction = std::fabs(actred) <= settings.ftol && prered <= settings.ftol && 0.5 * ratio <= 1.0;
      if (small_reduction) info = 1;
      if (delta <= settings.xtol * xnorm) info = small_reduction ? 3 : 2;
      if (info != 0) return result;
      if (nfev >= settings.maxfev) info = 5;
      if (std::fabs(actred) <= epsmch && prered <= epsmch && 0.5 * ratio <= 1.0) info = 6;
      if (delta <= epsmch * xnorm) info = 7;
      if (gnorm <= epsmch) info = 8;
      if (info != 0) return result;
      if (ratio >= 1e-4) break;
    }
  }
}

}  // namespace perseus::lm
