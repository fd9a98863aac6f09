// Command meshwave is the meshwave agent and its command line.
//
//	meshwave run    [--config FILE] [--metrics-address ADDR] [--kubeconfig FILE] [--context NAME]
//	meshwave plan   [-o table|json] [--config FILE] [--kubeconfig FILE] [--context NAME]
//	meshwave status [-o table|json] [--kubeconfig FILE] [--context NAME]
//	meshwave holders REVISION [-o table|json] [--config FILE] [--kubeconfig FILE] [--context NAME]
//	meshwave create-remote-secret --name CLUSTER [--service-account-namespace NS] [--secret-namespace NS] [--server URL] [--token-expiration D] [--kubeconfig FILE] [--context NAME]
//	meshwave fleet status [-o table|json] [--config FILE] [--kubeconfig FILE]
//	meshwave version
//
// Run as kubectl-meshwave, it is the kubectl plugin "kubectl meshwave".
// Without --kubeconfig it follows kubectl's rules: $KUBECONFIG, then
// ~/.kube/config, then the in-cluster service account.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	// The image has no zoneinfo: maintenance windows name IANA zones.
	_ "time/tzdata"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/meshwave/meshwave/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli{name: programName(os.Args[0]), stdout: os.Stdout, stderr: os.Stderr}.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// common are the flags every command takes.
type common struct {
	kubeconfig, context, config string
	encoding                    string
}

// encodings are the values of -kube-api-encoding: the content type the
// clients ask the API server for, of the built-in kinds.
var encodings = map[string]string{
	"protobuf": runtime.ContentTypeProtobuf,
	"json":     runtime.ContentTypeJSON,
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	fs.StringVar(&c.context, "context", "", "kubeconfig context to use")
	fs.StringVar(&c.config, "config", "", "path to the agent's YAML config file (default: built-in defaults)")
	c.encoding = "protobuf"
	fs.Func("kube-api-encoding", "the `encoding` the Kubernetes API server sends the built-in kinds in: protobuf (the default, as Kubernetes' own controllers ask for) or json", func(v string) error {
		if _, ok := encodings[v]; !ok {
			return fmt.Errorf("%q is not an encoding: expected protobuf or json", v)
		}
		c.encoding = v
		return nil
	})
}

func (c *common) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "meshwave"
	cfg.QPS, cfg.Burst = 50, 100
	// The built-in kinds in the encoding asked for, JSON for the others
	// (the dynamic client asks for JSON whatever this says).
	cfg.ContentType = encodings[c.encoding]
	cfg.AcceptContentTypes = encodings[c.encoding] + "," + runtime.ContentTypeJSON
	agent.CountReceived(cfg)
	return cfg, nil
}

func (c *common) clients() (kubernetes.Interface, agent.Config, error) {
	client, _, cfg, err := c.clientsWithMetadata()
	return client, cfg, err
}

// clientsWithMetadata adds a client of objects' metadata, which reads
// Jobs without their pod templates.
func (c *common) clientsWithMetadata() (kubernetes.Interface, metadata.Interface, agent.Config, error) {
	cfg, err := agent.LoadConfig(c.config)
	if err != nil {
		return nil, nil, cfg, err
	}
	rc, err := c.restConfig()
	if err != nil {
		return nil, nil, cfg, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, cfg, err
	}
	md, err := metadata.NewForConfig(rc)
	return client, md, cfg, err
}

// runOptions are run's flags.
type runOptions struct {
	common
	metricsAddr string
	profiling   bool
}

// parseRun parses run's flags. Its help lists meshwave's own flags and
// klog's -v; the rest of klog's flags still parse, and --help-logging
// lists them.
func (c cli) parseRun(args []string) (runOptions, error) {
	var opts runOptions
	cmd := newCommand("run")
	opts.register(cmd.shown)
	cmd.shown.StringVar(&opts.metricsAddr, "metrics-address", ":8080", "where to serve /metrics, /healthz and /readyz")
	cmd.shown.BoolVar(&opts.profiling, "profiling", false, "serve Go's profiles at /debug/pprof/ on the metrics address too")
	cmd.hidden = flag.NewFlagSet("logging", flag.ContinueOnError)
	klog.InitFlags(cmd.hidden)
	cmd.shown.Var(cmd.hidden.Lookup("v").Value, "v", "log `level`: 0 logs what the agent does, 4 adds each evaluation of a wave's gates and each namespace write, 6 every Kubernetes API request")
	cmd.helpHidden = "help-logging"
	cmd.shown.Bool(cmd.helpHidden, false, "list klog's logging flags, which run also accepts")
	return opts, c.parse(cmd, args)
}

func (cl cli) runCommand(ctx context.Context, args []string) error {
	opts, err := cl.parseRun(args)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Before any client or queue exists: client-go takes one registration.
	agent.RegisterClientMetrics(reg)
	client, md, cfg, err := opts.clientsWithMetadata()
	if err != nil {
		return err
	}
	tp, shutdownTraces, err := agent.NewTracerProvider(ctx)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTraces(sctx)
	}()
	// The chart passes the pod's name and IP from the downward API; the
	// sync client names itself with them when it asks istiod.
	deps := agent.GateDeps{PodName: os.Getenv("POD_NAME"), PodIP: os.Getenv("POD_IP")}
	rc, err := opts.restConfig()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctrl, err := agent.New(agent.Options{Client: client, Metadata: md, Dynamic: dyn, RestConfig: rc, Config: cfg, GateDeps: deps, Registerer: reg, TracerProvider: tp})
	if err != nil {
		return err
	}
	defer ctrl.Shutdown()
	handler := ctrl.Handler(reg)
	if opts.profiling {
		handler = withProfiling(handler)
	}
	srv := &http.Server{Addr: opts.metricsAddr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ListenAndServe() }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	runErr := make(chan error, 1)
	go func() { runErr <- ctrl.Run(klog.NewContext(ctx, klog.Background())) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("metrics server: %w", err)
	case err := <-runErr:
		return err
	}
}

// parseReadOnly parses the flags of plan or status: the common ones and -o.
func (c cli) parseReadOnly(name string, args []string) (common, string, error) {
	opts, format, _, err := c.parseReadOnlyArg(name, "", args)
	return opts, format, err
}

// parseReadOnlyArg parses a read-only command that takes one argument,
// named arg (none when empty), and returns it.
func (c cli) parseReadOnlyArg(name, arg string, args []string) (common, string, string, error) {
	var opts common
	cmd := newCommand(name)
	cmd.arg = arg
	opts.register(cmd.shown)
	format := cmd.shown.String("o", "table", "output `format`: table or json")
	if err := c.parse(cmd, args); err != nil {
		return opts, "", "", err
	}
	if *format != "table" && *format != "json" {
		return opts, "", "", &usageError{fmt.Sprintf("%s: -o %q is not table or json", name, *format)}
	}
	if len(cmd.args) == 1 {
		return opts, *format, cmd.args[0], nil
	}
	return opts, *format, "", nil
}

// holdersCommand lists the pods of a revision. It exits 3 (errHeld) while
// any of them runs its proxy, or runs in ambient mode through its
// ztunnels, so that "meshwave holders 1-25 && helm
// uninstall istiod-1-25" removes a control plane only once nothing needs
// it; completed and failed pods are listed but do not count.
func (cl cli) holdersCommand(ctx context.Context, args []string) error {
	c, format, revision, err := cl.parseReadOnlyArg("holders", "<revision>", args)
	if err != nil {
		return err
	}
	client, md, cfg, err := c.clientsWithMetadata()
	if err != nil {
		return err
	}
	h, err := agent.HoldersNow(ctx, client, md, cfg, revision)
	if err != nil {
		return err
	}
	if err := agent.RenderHolders(cl.stdout, h, format); err != nil {
		return err
	}
	if h.Pods > 0 || h.AmbientPods > 0 {
		return errHeld
	}
	return nil
}

func (cl cli) planCommand(ctx context.Context, args []string) error {
	c, format, err := cl.parseReadOnly("plan", args)
	if err != nil {
		return err
	}
	client, cfg, err := c.clients()
	if err != nil {
		return err
	}
	plan, err := agent.PlanNow(ctx, client, cfg)
	if err != nil {
		return err
	}
	return agent.RenderPlan(cl.stdout, plan, format)
}

func (cl cli) statusCommand(ctx context.Context, args []string) error {
	c, format, err := cl.parseReadOnly("status", args)
	if err != nil {
		return err
	}
	rc, err := c.restConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	rows, err := agent.StatusNow(ctx, client, time.Now())
	if err != nil {
		return err
	}
	return agent.RenderStatus(cl.stdout, rows, format)
}

// createRemoteSecretCommand makes, in the cluster of the kubeconfig, the
// account that the other clusters of the fleet read its namespaces with,
// and prints the Secret to apply in each of them.
func (cl cli) createRemoteSecretCommand(ctx context.Context, args []string) error {
	var opts common
	cmd := newCommand("create-remote-secret")
	opts.register(cmd.shown)
	name := cmd.shown.String("name", "", "this cluster's `name` in the fleet's rings (required)")
	accountNS := cmd.shown.String("service-account-namespace", "istio-system", "the `namespace` of the reading account in this cluster")
	secretNS := cmd.shown.String("secret-namespace", "istio-system", "the `namespace` of the Secret in the other clusters: where their agents run")
	server := cmd.shown.String("server", "", "the `URL` the other clusters reach this apiserver at (default: the kubeconfig's)")
	expiration := cmd.shown.Duration("token-expiration", 8760*time.Hour, "how long the account's token lives: create the Secret again before then")
	if err := cl.parse(cmd, args); err != nil {
		return err
	}
	if msgs := validation.IsDNS1123Label(*name); len(msgs) > 0 {
		return &usageError{fmt.Sprintf("create-remote-secret: --name %q is not a cluster name (a DNS-1123 label): %s", *name, strings.Join(msgs, "; "))}
	}
	if *expiration < 10*time.Minute {
		return &usageError{fmt.Sprintf("create-remote-secret: --token-expiration %s is not at least 10m, the shortest token the apiserver issues", *expiration)}
	}
	rc, err := opts.restConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	secret, err := agent.CreateRemoteSecret(ctx, client, rc, agent.RemoteSecretOptions{Cluster: *name, AccountNamespace: *accountNS,
		SecretNamespace: *secretNS, Server: *server, TokenExpiration: *expiration})
	if err != nil {
		return err
	}
	out, err := yaml.Marshal(secret)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cl.stdout, "# The Secret the other clusters of the fleet read cluster %s with: apply it in each of them.\n%s", *name, out)
	return err
}

// fleetCommand runs `fleet status`: every cluster of the config's rings,
// read through the local kubeconfig's context of its name.
func (cl cli) fleetCommand(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "status" {
		return &usageError{"fleet: the one subcommand is status: " + cl.name + " fleet status [-o table|json] [--config FILE] [--kubeconfig FILE]"}
	}
	c, format, err := cl.parseReadOnly("fleet status", args[1:])
	if err != nil {
		return err
	}
	cfg, err := agent.LoadConfig(c.config)
	if err != nil {
		return err
	}
	if len(cfg.Fleet.Rings) == 0 {
		return &usageError{"fleet status: the config has no fleet.rings: give the agent's config file with --config"}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	raw, err := rules.Load()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	clients := map[string]kubernetes.Interface{}
	for _, r := range cfg.Fleet.Rings {
		for _, name := range r.Clusters {
			if _, ok := raw.Contexts[name]; !ok {
				continue
			}
			rc, err := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
			if err != nil {
				return fmt.Errorf("kubeconfig context %s: %w", name, err)
			}
			rc.UserAgent = "meshwave"
			client, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			clients[name] = client
		}
	}
	return agent.RenderFleetStatus(cl.stdout, agent.FleetStatusNow(ctx, cfg.Fleet, clients, time.Now()), format)
}
