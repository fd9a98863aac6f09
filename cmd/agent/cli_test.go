package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// invoke runs the command line as the program name would and returns its
// exit code, stdout and stderr.
func invoke(t *testing.T, name string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli{name: name, stdout: &stdout, stderr: &stderr}.run(context.Background(), args)
	return code, stdout.String(), stderr.String()
}

func golden(t *testing.T, file, got string) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), got)
}

func TestProgramName(t *testing.T) {
	for argv0, want := range map[string]string{
		"meshwave":                            "meshwave",
		"/usr/local/bin/meshwave":             "meshwave",
		"/tmp/go-build123/b001/exe/agent":     "meshwave",
		"kubectl-meshwave":                    "kubectl meshwave",
		"/home/me/.krew/bin/kubectl-meshwave": "kubectl meshwave",
		"kubectl-meshwave.exe":                "kubectl meshwave",
		"kubectl-mesh_wave-agent":             "kubectl mesh-wave agent",
		"kubectl-":                            "meshwave",
	} {
		assert.Equal(t, want, programName(argv0), "argv[0] %q", argv0)
	}
}

func TestRunHelpListsMeshwaveFlagsAndVerbosityOnly(t *testing.T) {
	for _, help := range []string{"-h", "--help"} {
		code, stdout, stderr := invoke(t, "meshwave", "run", help)
		assert.Equal(t, 0, code)
		assert.Empty(t, stderr)
		golden(t, "run-help.txt", stdout)
		for _, klogOnly := range []string{"log_file", "skip_headers", "logtostderr", "vmodule", "add_dir_header"} {
			assert.NotContains(t, stdout, klogOnly)
		}
	}
}

func TestRunHelpLoggingListsKlogFlags(t *testing.T) {
	code, stdout, stderr := invoke(t, "meshwave", "run", "--help-logging")
	assert.Equal(t, 0, code)
	assert.Empty(t, stderr)
	assert.Regexp(t, `^usage: meshwave run \[flags\]\n\nlogging flags \(klog\):\n  -add_dir_header\n`, stdout)
	for _, flag := range []string{"\n  -log_file string\n", "\n  -skip_headers\n", "\n  -vmodule value\n", "\n  -v value\n", "\n  -logtostderr\n"} {
		assert.Contains(t, stdout, flag)
	}
	assert.NotContains(t, stdout, "-metrics-address")
}

func TestRunStillAcceptsKlogFlags(t *testing.T) {
	opts, err := cli{name: "meshwave"}.parseRun([]string{
		"--config=/etc/meshwave/config.yaml", "--metrics-address=:9090",
		"-skip_headers", "--log_file_max_size=10", "--v=4",
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := cli{name: "meshwave"}.parseRun([]string{"-v=0", "-skip_headers=false", "-log_file_max_size=1800"})
		require.NoError(t, err)
	})
	assert.Equal(t, "/etc/meshwave/config.yaml", opts.config)
	assert.Equal(t, ":9090", opts.metricsAddr)
	assert.True(t, bool(klog.V(4).Enabled()), "--v=4 reaches klog")
	assert.False(t, bool(klog.V(5).Enabled()))
}

func TestBadCommandLinesExitTwoAndSayWhy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"an unknown flag", []string{"run", "--log-file=x"},
			"meshwave: run: flag provided but not defined: -log-file\nrun \"meshwave run -h\" for its flags\n"},
		{"an argument where none is taken", []string{"plan", "shop"},
			"meshwave: plan takes no arguments, got [\"shop\"]\nrun \"meshwave plan -h\" for its flags\n"},
		{"an output format that does not exist", []string{"status", "-o", "yaml"},
			"meshwave: status: -o \"yaml\" is not table or json\n"},
		{"a flag value that does not parse", []string{"run", "-v=loud"},
			"meshwave: run: invalid value \"loud\" for flag -v: strconv.ParseInt: parsing \"loud\": invalid syntax\nrun \"meshwave run -h\" for its flags\n"},
		{"version with an argument", []string{"version", "--short"},
			"meshwave: version takes no arguments or flags, got [\"--short\"]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := invoke(t, "meshwave", tc.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, stdout)
			assert.Equal(t, tc.stderr, stderr)
		})
	}
}

func TestNoCommandPrintsUsageAndExitsTwo(t *testing.T) {
	code, stdout, stderr := invoke(t, "meshwave")
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	golden(t, "usage.txt", stderr)
}

func TestUnknownCommandNamesIt(t *testing.T) {
	code, _, stderr := invoke(t, "meshwave", "rollout")
	assert.Equal(t, 2, code)
	assert.Regexp(t, "^meshwave: unknown command \"rollout\"\nusage: meshwave <command> \\[flags\\]\n", stderr)
}

func TestAsAKubectlPluginTheHelpSaysKubectlMeshwave(t *testing.T) {
	name := programName("/usr/local/bin/kubectl-meshwave")
	code, stdout, _ := invoke(t, name, "--help")
	assert.Equal(t, 0, code)
	golden(t, "usage-kubectl.txt", stdout)

	code, stdout, _ = invoke(t, name, "status", "-h")
	assert.Equal(t, 0, code)
	assert.Equal(t, `usage: kubectl meshwave status [flags]

flags:
  -config string
    	path to the agent's YAML config file (default: built-in defaults)
  -context string
    	kubeconfig context to use
  -kube-api-encoding encoding
    	the encoding the Kubernetes API server sends the built-in kinds in: protobuf (the default, as Kubernetes' own controllers ask for) or json
  -kubeconfig string
    	path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, then in-cluster)
  -o format
    	output format: table or json (default "table")
`, stdout)
}

func TestVersionPrintsTheStampedVersionAndRevision(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "1.2.3", "0123456789abcdef0123456789abcdef01234567"
	want := "meshwave 1.2.3 (revision 0123456789abcdef0123456789abcdef01234567, " +
		runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := invoke(t, "kubectl meshwave", args...)
		assert.Equal(t, 0, code)
		assert.Empty(t, stderr)
		assert.Equal(t, want, stdout)
	}
}
