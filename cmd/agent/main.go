// Command meshwave is the meshwave agent and its command line.
//
//	meshwave run    [--config FILE] [--metrics-address ADDR] [--kubeconfig FILE] [--context NAME]
//	meshwave plan   [-o table|json] [--config FILE] [--kubeconfig FILE] [--context NAME]
//	meshwave status [-o table|json] [--kubeconfig FILE] [--context NAME]
//
// Without --kubeconfig it follows kubectl's rules: $KUBECONFIG, then
// ~/.kube/config, then the in-cluster service account.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/agent"
)

const usage = `usage: meshwave <command> [flags]

commands:
  run     run the agent
  plan    print the waves the agent would run now, without writing anything
  status  print each namespace's migration: phase, wave, workloads, verdicts

run "meshwave <command> -h" for a command's flags`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "run":
		err = runCommand(ctx, os.Args[2:])
	case "plan":
		err = planCommand(ctx, os.Args[2:], os.Stdout)
	case "status":
		err = statusCommand(ctx, os.Args[2:], os.Stdout)
	case "-h", "--help", "help":
		fmt.Println(usage)
		return
	default:
		err = fmt.Errorf("unknown command %q\n%s", os.Args[1], usage)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshwave:", err)
		os.Exit(1)
	}
}

// common are the flags every command takes.
type common struct {
	kubeconfig, context, config string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	fs.StringVar(&c.context, "context", "", "kubeconfig context to use")
	fs.StringVar(&c.config, "config", "", "path to the agent's YAML config file (default: built-in defaults)")
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
	return cfg, nil
}

func (c *common) clients() (kubernetes.Interface, agent.Config, error) {
	cfg, err := agent.LoadConfig(c.config)
	if err != nil {
		return nil, cfg, err
	}
	rc, err := c.restConfig()
	if err != nil {
		return nil, cfg, err
	}
	client, err := kubernetes.NewForConfig(rc)
	return client, cfg, err
}

func runCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var c common
	c.register(fs)
	metricsAddr := fs.String("metrics-address", ":8080", "where to serve /metrics, /healthz and /readyz")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Before any client or queue exists: client-go takes one registration.
	agent.RegisterClientMetrics(reg)
	client, cfg, err := c.clients()
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
	ctrl, err := agent.New(agent.Options{Client: client, Config: cfg, GateDeps: deps, Registerer: reg, TracerProvider: tp})
	if err != nil {
		return err
	}
	defer ctrl.Shutdown()
	srv := &http.Server{Addr: *metricsAddr, Handler: ctrl.Handler(reg), ReadHeaderTimeout: 5 * time.Second}
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

// parseWithFormat parses a read-only command's flags, -o included.
func parseWithFormat(fs *flag.FlagSet, args []string) (string, error) {
	format := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if *format != "table" && *format != "json" {
		return "", fmt.Errorf("-o %q is not table or json", *format)
	}
	return *format, nil
}

func planCommand(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	var c common
	c.register(fs)
	format, err := parseWithFormat(fs, args)
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
	return agent.RenderPlan(out, plan, format)
}

func statusCommand(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var c common
	c.register(fs)
	format, err := parseWithFormat(fs, args)
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
	return agent.RenderStatus(out, rows, format)
}
