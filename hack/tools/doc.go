// Package tools pins the command-line tools the build runs through the Go
// toolchain ("go tool -modfile=hack/tools/go.mod helm", crane for pushing
// the image), and holds the build's own programs (the dashboard generator,
// the image builder, the simulation study of the sequential metric
// check), in a module of their own so that their dependencies
// never reach meshwave's.
package tools
