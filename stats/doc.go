// Package stats holds the statistics that decide Shoal's tests: Elo and LOS for fixed-game runs,
// the generalized SPRT with its dynamic overshoot correction, the SPRT Elo estimate, classic
// SPSA, and the chi-square test that finds bad workers. Everything is a pure function of its
// arguments, without I/O, and matches fishtest's numbers (see testdata/README.md for how that is
// checked).
package stats
