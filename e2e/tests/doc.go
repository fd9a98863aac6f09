// Package tests holds the end-to-end scenarios. They live in one package
// because every package that links the control plane builds its own 180 MB
// test binary.
package tests
