// Package sequential holds the anytime-valid tests a wave's sequential
// metric checks decide on.
//
// A test here is an e-process: a running product of likelihood ratios, one
// factor for each look at the counts, whose expected value under the
// hypothesis it tests never exceeds one. By Ville's inequality, the chance
// that it ever reaches 1/α while that hypothesis holds is at most α, so the
// counts may be looked at after every scrape, for as long as the wave
// lasts, without raising the chance of a wrong verdict past α. A fixed
// threshold checked at every interval has no such bound: each look is
// another chance to fail a healthy wave on noise.
//
// Each factor bets on an alternative chosen from the counts of the earlier
// looks only (a predictable plug-in), never from the look it is paid on;
// that is what keeps the product's expectation at one. The tests are pure:
// they take counts and give evidence, with no clock and no Prometheus.
package sequential
