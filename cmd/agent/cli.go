package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

// version and revision are stamped at link time by the Makefile (-X
// main.version=..., from the chart's appVersion, and -X main.revision=...,
// the git commit); a plain "go build" reports version "dev".
var (
	version  = "dev"
	revision = ""
)

// cli is one invocation of the command line: the name it calls itself in
// its help and errors, and where it writes.
type cli struct {
	name           string
	stdout, stderr io.Writer
}

// programName is how the binary run as argv0 names itself. kubectl runs an
// executable named kubectl-NAME on PATH as "kubectl NAME" (a dash in the
// file name separates words of the command, an underscore stands for a dash),
// so as a plugin its help says "kubectl meshwave"; under any other name,
// "agent" from a plain "go build ./cmd/agent" included, it is meshwave.
func programName(argv0 string) string {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	plugin, ok := strings.CutPrefix(base, "kubectl-")
	if !ok || plugin == "" {
		return "meshwave"
	}
	return "kubectl " + strings.ReplaceAll(strings.ReplaceAll(plugin, "-", " "), "_", "-")
}

func (c cli) usage() string {
	return fmt.Sprintf(`usage: %[1]s <command> [flags]

commands:
  run                   run the agent
  plan                  print the waves the agent would run now, without writing anything
  status                print each namespace's migration: phase, wave, workloads, verdicts
  holders               list every pod still injected by a revision, and whether meshwave will move it
  create-remote-secret  make the account the fleet's other clusters read this cluster's namespaces with, and print their Secret
  fleet status          print every cluster of the fleet's rings, its namespaces, phases and waits (contexts named after the clusters)
  version               print meshwave's version

run "%[1]s <command> -h" for a command's flags`, c.name)
}

// usageError is a command line meshwave cannot make sense of; it exits 2,
// as the flag package does, rather than 1.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// errHeld is holders' answer that pods still run the revision's proxy: it
// exits 3, with nothing more to say than the output did.
var errHeld = errors.New("the revision still runs proxies")

// run runs the command line args (without the program name) and returns
// the exit code: 0, 1 when the command failed, 2 for a bad command line,
// and 3 when holders found pods that still run the revision's proxy.
func (c cli) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(c.stderr, c.usage())
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = c.runCommand(ctx, args[1:])
	case "plan":
		err = c.planCommand(ctx, args[1:])
	case "status":
		err = c.statusCommand(ctx, args[1:])
	case "holders":
		err = c.holdersCommand(ctx, args[1:])
	case "create-remote-secret":
		err = c.createRemoteSecretCommand(ctx, args[1:])
	case "fleet":
		err = c.fleetCommand(ctx, args[1:])
	case "version", "--version", "-version":
		err = c.versionCommand(args[1:])
	case "-h", "--help", "-help", "help":
		fmt.Fprintln(c.stdout, c.usage())
		return 0
	default:
		err = &usageError{fmt.Sprintf("unknown command %q\n%s", args[0], c.usage())}
	}
	return c.exitCode(err)
}

// exitCode reports err, if it says anything, and returns the exit code.
func (c cli) exitCode(err error) int {
	var usageErr *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errHeld):
		return 3
	case errors.As(err, &usageErr):
		fmt.Fprintf(c.stderr, "%s: %v\n", c.name, err)
		return 2
	default:
		fmt.Fprintf(c.stderr, "%s: %v\n", c.name, err)
		return 1
	}
}

// command is a subcommand's flags. Every flag in shown or hidden parses;
// -h lists shown only, and the flag named helpHidden lists hidden.
type command struct {
	name   string
	shown  *flag.FlagSet
	hidden *flag.FlagSet
	// helpHidden is the bool flag in shown that lists hidden; set when hidden is.
	helpHidden string
	// arg names the one argument the command takes, e.g. "<revision>";
	// empty when it takes none.
	arg string
	// args are the arguments parse found, flags before and after them.
	args []string
}

func newCommand(name string) *command {
	return &command{name: name, shown: flag.NewFlagSet(name, flag.ContinueOnError)}
}

// parse parses args. -h (or --help) prints the command's help to stdout and
// returns flag.ErrHelp, as does the hidden group's help flag; a flag that
// does not parse, or an argument where none is taken, is a usageError that
// says where the help is.
func (c cli) parse(cmd *command, args []string) error {
	all := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	all.SetOutput(io.Discard)
	all.Usage = func() {}
	cmd.shown.VisitAll(func(f *flag.Flag) { all.Var(f.Value, f.Name, f.Usage) })
	if cmd.hidden != nil {
		cmd.hidden.VisitAll(func(f *flag.Flag) {
			if all.Lookup(f.Name) == nil {
				all.Var(f.Value, f.Name, f.Usage)
			}
		})
	}
	err := all.Parse(args)
	// Flags may follow an argument: "holders 1-25 -o json".
	for err == nil && cmd.arg != "" && all.NArg() > 0 {
		cmd.args = append(cmd.args, all.Arg(0))
		err = all.Parse(all.Args()[1:])
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.printHelp(strings.TrimSpace(cmd.name+" "+cmd.arg), "flags", cmd.shown)
		if cmd.hidden != nil {
			fmt.Fprintf(c.stdout, "\nklog's logging flags are accepted too; \"%s %s --%s\" lists them.\n", c.name, cmd.name, cmd.helpHidden)
		}
		return err
	case err != nil:
		return &usageError{fmt.Sprintf("%s: %v\nrun \"%s %s -h\" for its flags", cmd.name, err, c.name, cmd.name)}
	case all.NArg() > 0:
		return &usageError{fmt.Sprintf("%s takes no arguments, got %q\nrun \"%s %s -h\" for its flags", cmd.name, all.Args(), c.name, cmd.name)}
	case cmd.arg != "" && len(cmd.args) != 1:
		return &usageError{fmt.Sprintf("%s takes one argument, %s, got %q\nrun \"%s %s -h\" for its flags", cmd.name, cmd.arg, cmd.args, c.name, cmd.name)}
	}
	if cmd.hidden != nil && all.Lookup(cmd.helpHidden).Value.String() == "true" {
		c.printHelp(cmd.name, "logging flags (klog)", cmd.hidden)
		return flag.ErrHelp
	}
	return nil
}

func (c cli) printHelp(name, title string, fs *flag.FlagSet) {
	fmt.Fprintf(c.stdout, "usage: %s %s [flags]\n\n%s:\n", c.name, name, title)
	fs.SetOutput(c.stdout)
	fs.PrintDefaults()
}

func (c cli) versionCommand(args []string) error {
	if len(args) > 0 {
		return &usageError{fmt.Sprintf("version takes no arguments or flags, got %q", args)}
	}
	fmt.Fprintln(c.stdout, versionString())
	return nil
}

// versionString is one line: the version, the commit it was built from and
// the Go toolchain and platform, e.g.
// "meshwave 0.1.0 (revision 582b159..., go1.26.8 linux/amd64)".
func versionString() string {
	rev := revision
	if rev == "" {
		rev = vcsRevision()
	}
	if rev == "" {
		rev = "unknown"
	}
	return fmt.Sprintf("meshwave %s (revision %s, %s %s/%s)", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// vcsRevision is the commit the go command stamped into the binary, if it did.
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}
