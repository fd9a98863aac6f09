// Command meshwave is the meshwave agent and its command line.
//
//	meshwave run    [--config FILE] [--kubeconfig FILE] [--context NAME]
//	meshwave plan   [-o table|json] [--config FILE] [--kubeconfig FILE] [--context NAME]
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
	"os"
	"os/signal"
	"syscall"

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
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	client, cfg, err := c.clients()
	if err != nil {
		return err
	}
	ctrl, err := agent.New(agent.Options{Client: client, Config: cfg})
	if err != nil {
		return err
	}
	defer ctrl.Shutdown()
	return ctrl.Run(klog.NewContext(ctx, klog.Background()))
}

func planCommand(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	var c common
	c.register(fs)
	format := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("-o %q is not table or json", *format)
	}
	client, cfg, err := c.clients()
	if err != nil {
		return err
	}
	plan, err := agent.PlanNow(ctx, client, cfg)
	if err != nil {
		return err
	}
	return renderPlan(out, plan, *format)
}
