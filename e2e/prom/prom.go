// Package prom runs a real Prometheus server for the local world: it writes
// a scrape configuration, starts the binary on loopback, and waits for
// scrapes and rate windows instead of sleeping.
package prom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/meshwave/meshwave/e2e/checkout"
)

// Target is a static target of a scrape job. Targets with the same Job
// are that job's instances (the first one's Path applies to all).
type Target struct {
	Job  string
	Addr string // host:port
	Path string // default /metrics
	// Labels are set on every series scraped from the target, as a
	// fleet's Prometheus labels each cluster's (an external label of the
	// cluster's own Prometheus, under federation or Thanos).
	Labels map[string]string
}

// Options configure a Server.
type Options struct {
	// Binary is the prometheus executable; default: $MESHWAVE_PROMETHEUS,
	// then e2e/.cache/prometheus/usr/bin/prometheus, then $PATH.
	Binary string
	// Targets are scraped every ScrapeInterval.
	Targets []Target
	// ScrapeInterval defaults to 1s.
	ScrapeInterval time.Duration
	// Dir holds the configuration, the TSDB and the log. Empty means a
	// temporary directory removed on Stop.
	Dir string
	// RuleFiles are Prometheus rule files (recording and alerting rules),
	// evaluated every ScrapeInterval.
	RuleFiles []string
}

// Server is a running Prometheus.
type Server struct {
	// URL is the base URL of its HTTP API.
	URL string
	// API is a query client for it.
	API promv1.API

	opts   Options
	addr   string
	dir    string
	ownDir bool
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	// started is when the process last started.
	started time.Time
}

// FindBinary locates the prometheus executable as described on Options.
func FindBinary() (string, error) {
	if b := os.Getenv("MESHWAVE_PROMETHEUS"); b != "" {
		return b, nil
	}
	if b, err := checkout.Path("e2e", ".cache", "prometheus", "usr", "bin", "prometheus"); err == nil {
		if _, err := os.Stat(b); err == nil {
			return b, nil
		}
	}
	if b, err := exec.LookPath("prometheus"); err == nil {
		return b, nil
	}
	return "", errors.New("no prometheus binary: run `make prometheus` (or e2e/hack/get-prometheus.sh), or set MESHWAVE_PROMETHEUS")
}

// Start writes the configuration and starts Prometheus on a free loopback
// port. It returns once the server answers /-/ready.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.ScrapeInterval == 0 {
		opts.ScrapeInterval = time.Second
	}
	if opts.Binary == "" {
		b, err := FindBinary()
		if err != nil {
			return nil, err
		}
		opts.Binary = b
	}
	s := &Server{opts: opts, dir: opts.Dir}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "meshwave-prometheus-")
		if err != nil {
			return nil, err
		}
		s.dir, s.ownDir = d, true
	} else if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.addr = l.Addr().String()
	l.Close()
	s.URL = "http://" + s.addr
	client, err := promapi.NewClient(promapi.Config{Address: s.URL})
	if err != nil {
		return nil, err
	}
	s.API = promv1.NewAPI(client)
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

func (s *Server) writeConfig() error {
	type staticConfig struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels,omitempty"`
	}
	type scrapeConfig struct {
		JobName       string         `json:"job_name"`
		MetricsPath   string         `json:"metrics_path,omitempty"`
		StaticConfigs []staticConfig `json:"static_configs"`
	}
	interval := model.Duration(s.opts.ScrapeInterval).String()
	cfg := map[string]any{
		"global": map[string]any{"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
	}
	// Targets of one job are its instances, as a ServiceMonitor's
	// replicas are.
	var jobs []scrapeConfig
	index := map[string]int{}
	for _, t := range s.opts.Targets {
		if i, ok := index[t.Job]; ok {
			if len(t.Labels) > 0 {
				jobs[i].StaticConfigs = append(jobs[i].StaticConfigs, staticConfig{Targets: []string{t.Addr}, Labels: t.Labels})
				continue
			}
			jobs[i].StaticConfigs[0].Targets = append(jobs[i].StaticConfigs[0].Targets, t.Addr)
			continue
		}
		index[t.Job] = len(jobs)
		jobs = append(jobs, scrapeConfig{JobName: t.Job, MetricsPath: t.Path, StaticConfigs: []staticConfig{{Targets: []string{t.Addr}, Labels: t.Labels}}})
	}
	cfg["scrape_configs"] = jobs
	if len(s.opts.RuleFiles) > 0 {
		cfg["rule_files"] = s.opts.RuleFiles
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "prometheus.yml"), raw, 0o644)
}

func (s *Server) start(ctx context.Context) error {
	logFile, err := os.OpenFile(filepath.Join(s.dir, "prometheus.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.opts.Binary,
		"--config.file="+filepath.Join(s.dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(s.dir, "data"),
		"--storage.tsdb.retention.time=6h",
		"--web.listen-address="+s.addr,
		"--web.enable-lifecycle",
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that a Ctrl-C meant for the demo reaches
	// Prometheus only through Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", s.opts.Binary, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.started = cmd, exited, time.Now()
	s.mu.Unlock()

	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("prometheus exited while starting; see %s", filepath.Join(s.dir, "prometheus.log"))
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/-/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		s.Stop()
		return err
	}
	return nil
}

// AddTarget adds a scrape job and reloads the configuration.
func (s *Server) AddTarget(ctx context.Context, t Target) error {
	s.mu.Lock()
	s.opts.Targets = append(s.opts.Targets, t)
	s.mu.Unlock()
	return s.reload(ctx)
}

// AddRuleFile adds a rule file and reloads the configuration. Prometheus
// refuses a reload whose rules do not parse, and says why.
func (s *Server) AddRuleFile(ctx context.Context, path string) error {
	s.mu.Lock()
	s.opts.RuleFiles = append(s.opts.RuleFiles, path)
	s.mu.Unlock()
	return s.reload(ctx)
}

func (s *Server) reload(ctx context.Context) error {
	if err := s.writeConfig(); err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/-/reload", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reload prometheus: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Alerts returns the alerts Prometheus holds now, pending and firing.
func (s *Server) Alerts(ctx context.Context) ([]promv1.Alert, error) {
	res, err := s.API.Alerts(ctx)
	if err != nil {
		return nil, err
	}
	return res.Alerts, nil
}

// Stop terminates Prometheus and waits for it to exit. The data directory
// stays until Close, so Start can resume on the same TSDB.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart starts a stopped server again on the same address and data.
func (s *Server) Restart(ctx context.Context) error { return s.start(ctx) }

// Close stops the server and removes its directory if it made one.
func (s *Server) Close() {
	s.Stop()
	s.cleanup()
}

func (s *Server) cleanup() {
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

// Addr is the host:port Prometheus listens on.
func (s *Server) Addr() string { return s.addr }

// Query evaluates an instant query now.
func (s *Server) Query(ctx context.Context, q string) (model.Vector, error) {
	v, _, _, err := s.API.Query(ctx, q, time.Now())
	if err != nil {
		return nil, err
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %q returned %s, not a vector", q, v.Type())
	}
	return vec, nil
}

// WaitForScrape waits until job has been scraped successfully since the
// server last started. A restarted Prometheus serves the samples it had
// before it stopped, up included, until its first scrape about six seconds
// later, so a plain "up == 1" would pass on stale data.
func (s *Server) WaitForScrape(ctx context.Context, job string, timeout time.Duration) error {
	s.mu.Lock()
	since := s.started.Unix()
	s.mu.Unlock()
	// timestamp() must take the plain selector: applied to "up == 1" it
	// returns the evaluation time, which is always fresh.
	return s.WaitForQuery(ctx, fmt.Sprintf(`timestamp(up{job=%q}) > %d and up{job=%q} == 1`, job, since, job), 1, timeout)
}

// WaitForQuery waits until q returns at least n series. Use it to wait for
// one rate window, e.g. rate(x[10s]) > 0, before relying on a value.
func (s *Server) WaitForQuery(ctx context.Context, q string, n int, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		vec, err := s.Query(ctx, q)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = strconv.Itoa(len(vec)) + " series"
		return len(vec) >= n, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d series from %s: %w (last: %s)", n, q, err, strings.TrimSpace(last))
	}
	return nil
}
