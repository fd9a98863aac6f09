package canary

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// versioned gives 1-25 and 1-26 the proxy versions their istiods' images
// name.
func versioned(s *Snapshot) {
	s.Mesh.Revisions["1-25"] = Revision{Name: "1-25", Istiods: 1, ReadyIstiods: 1, ProxyVersion: "1.25.2", VersionFrom: "istiod image docker.io/istio/pilot:1.25.2"}
	s.Mesh.Revisions["1-26"] = Revision{Name: "1-26", Istiods: 1, ReadyIstiods: 1, ProxyVersion: "1.26.1", VersionFrom: "istiod image docker.io/istio/pilot:1.26.1"}
}

func filter(ns, name string, selector map[string]string, versions ...string) EnvoyFilter {
	return EnvoyFilter{Namespace: ns, Name: name, WorkloadSelector: selector, ProxyVersions: versions}
}

func TestEnvoyFiltersWhoseProxyVersionBehavesDifferentlyOnTheTargetAreReported(t *testing.T) {
	tests := []struct {
		name    string
		filters []EnvoyFilter
		mutate  func(*Snapshot)
		want    []string
	}{
		{"a root namespace filter for the source's version stops applying", []EnvoyFilter{filter("istio-system", "lua", nil, `^1\.25`)}, nil,
			[]string{`EnvoyFilter istio-system/lua: proxyVersion "^1\\.25" matches 1-25's proxies (1.25.2) but not 1-26's (1.26.1): its patch stops applying to the moved workloads; widen the regex or add a patch for 1.26.1`}},
		{"a filter matching both versions is fine", []EnvoyFilter{filter("shop", "both", map[string]string{"app": "a"}, `^1\.2[56]`)}, nil, nil},
		{"a filter without proxyVersion is fine", []EnvoyFilter{filter("shop", "any", nil)}, nil, nil},
		{"a filter matching neither version matches no proxy", []EnvoyFilter{filter("shop", "old", nil, `^1\.8`)}, nil,
			[]string{`EnvoyFilter shop/old: proxyVersion "^1\\.8" matches neither 1-25's proxies (1.25.2) nor 1-26's (1.26.1): its patch applies to no proxy of these workloads (istio/istio#26818); check the regex against ISTIO_VERSION`}},
		{"a filter for the target's version starts applying", []EnvoyFilter{filter("shop", "new", nil, `1\.26\.`)}, nil,
			[]string{`EnvoyFilter shop/new: proxyVersion "1\\.26\\." does not match 1-25's proxies (1.25.2) but matches 1-26's (1.26.1): its patch starts applying to the moved workloads; check that it suits 1.26.1`}},
		{"a regex istiod cannot compile is reported", []EnvoyFilter{filter("shop", "broken", nil, `1\.2(`)}, nil,
			[]string{`EnvoyFilter shop/broken: proxyVersion "1\\.2(" is not a valid regular expression, so its patch matches no proxy: fix the regex`}},
		{"a filter selecting no moved workload is not reported", []EnvoyFilter{filter("shop", "other", map[string]string{"app": "other"}, `^1\.25`)}, nil, nil},
		{"a regex repeated in several patches is reported once", []EnvoyFilter{filter("shop", "twice", map[string]string{"app": "a"}, `^1\.25`, `^1\.25`, `^1\.2`)}, nil,
			[]string{`EnvoyFilter shop/twice: proxyVersion "^1\\.25" matches 1-25's proxies (1.25.2) but not 1-26's (1.26.1): its patch stops applying to the moved workloads; widen the regex or add a patch for 1.26.1`}},
		{"a target of unknown version cannot be checked", []EnvoyFilter{filter("shop", "lua", nil, `^1\.25`)}, func(s *Snapshot) {
			r := s.Mesh.Revisions["1-26"]
			r.ProxyVersion = ""
			s.Mesh.Revisions["1-26"] = r
		}, []string{`EnvoyFilter shop/lua: proxyVersion "^1\\.25" cannot be checked: the proxy version of 1-26 is unknown (no istiod image tag or revision name gives it); check the regex against its ISTIO_VERSION by hand`}},
		{"a source of unknown version still shows a filter the target misses", []EnvoyFilter{filter("shop", "lua", nil, `^1\.25`)}, func(s *Snapshot) {
			r := s.Mesh.Revisions["1-25"]
			r.ProxyVersion = ""
			s.Mesh.Revisions["1-25"] = r
		}, []string{`EnvoyFilter shop/lua: proxyVersion "^1\\.25" does not match 1-26's proxies (1.26.1): its patch does not apply to the moved workloads; check the regex`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSim(t, deploy("a"))
			versioned(&s.snap)
			s.snap.Compat.EnvoyFilters = tt.filters
			if tt.mutate != nil {
				tt.mutate(&s.snap)
			}
			d := s.decide(nil)
			require.Equal(t, PhaseMigrating, d.Status.Phase)
			assert.Equal(t, tt.want, d.Status.Warnings)
			for _, w := range tt.want {
				assert.Contains(t, d.Events, Event{Type: EventWarning, Reason: "PrecheckWarning", Message: w})
			}
		})
	}
}

func TestTelemetriesWhoseSelectorTheMovedTemplatesLackAreReported(t *testing.T) {
	podLabel := func(k, v string) wopt {
		return func(w *Workload) {
			for i := range w.Pods {
				w.Pods[i].Labels = map[string]string{"app": w.TemplateLabels["app"], k: v}
			}
		}
	}
	tests := []struct {
		name string
		ts   []Telemetry
		want []string
	}{
		{"a selector every moved template carries is fine", []Telemetry{{Namespace: "shop", Name: "a", MatchLabels: map[string]string{"app": "a"}}}, nil},
		{"a Telemetry without a selector is fine", []Telemetry{{Namespace: "shop", Name: "all"}}, nil},
		{"a selector no template carries applies to none of them", []Telemetry{{Namespace: "shop", Name: "payments", MatchLabels: map[string]string{"app": "a", "team": "payments"}}},
			[]string{"Telemetry shop/payments: selector.matchLabels app=a,team=payments names labels no moved workload's template carries (team=payments absent): it applies to none of them; check the selector"}},
		{"a selector only today's pods carry stops applying once they restart", []Telemetry{{Namespace: "shop", Name: "tracing", MatchLabels: map[string]string{"tracing": "on"}}},
			[]string{"Telemetry shop/tracing: selector.matchLabels tracing=on selects the pods of deployment b through labels their template lacks (tracing=on): it stops applying once they restart; add the labels to the template"}},
		{"a selector of a workload the plan leaves out is about that workload", []Telemetry{{Namespace: "shop", Name: "gw", MatchLabels: map[string]string{"app": "ingress"}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSim(t, deploy("a"), deploy("b", podLabel("tracing", "on")), deploy("ingress", label("operator.istio.io/component", "IngressGateways")))
			s.snap.Compat.Telemetries = tt.ts
			d := s.decide(nil)
			require.Equal(t, PhaseMigrating, d.Status.Phase)
			var got []string
			for _, w := range d.Status.Warnings {
				if w[:len("Telemetry")] == "Telemetry" {
					got = append(got, w)
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestASailGracePeriodShorterThanTheMigrationIsReported(t *testing.T) {
	hour := int64(3600)
	tests := []struct {
		name   string
		istios []SailIstio
		want   []string
	}{
		{"the default 30s under RevisionBased", []SailIstio{{Name: "default", UpdateStrategy: "RevisionBased"}},
			[]string{"Istio default: spec.updateStrategy.inactiveRevisionDeletionGracePeriodSeconds is 30 (the default), shorter than this migration may take (2 waves, up to 12m0s): Sail deletes 1-25 once no workload uses it, before a rollback could return to it; raise it to at least 720"}},
		{"a grace of an hour covers it", []SailIstio{{Name: "default", UpdateStrategy: "RevisionBased", GracePeriodSeconds: &hour}}, nil},
		{"InPlace upgrades delete no revision", []SailIstio{{Name: "default", UpdateStrategy: "InPlace"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Two waves, each up to a 5m readiness timeout and a 1m delay,
			// without metric checks: 12m.
			s := newSim(t, deploy("a"), deploy("b"))
			s.snap.Compat.SailIstios = tt.istios
			d := s.decide(nil)
			require.Equal(t, PhaseMigrating, d.Status.Phase)
			assert.Equal(t, tt.want, d.Status.Warnings)
		})
	}
}

func TestTheMigrationEstimateCountsEveryWavesTimers(t *testing.T) {
	cfg := Config{MetricChecks: true, BakeTime: time.Minute, RequiredPasses: 2, AnalysisInterval: 30 * time.Second, DelayBetweenWaves: 30 * time.Second}
	assert.Equal(t, 21*time.Minute, MigrationEstimate(3, cfg))
	cfg.MetricChecks = false
	assert.Equal(t, 3*(5*time.Minute+30*time.Second), MigrationEstimate(3, cfg))
}

func TestADowngradeNeedsTheNamespacesOptIn(t *testing.T) {
	older := func(s *Snapshot) {
		versioned(s)
		r := s.Mesh.Revisions["1-26"]
		r.ProxyVersion, r.VersionFrom = "1.24.6", "istiod image docker.io/istio/pilot:1.24.6"
		s.Mesh.Revisions["1-26"] = r
	}
	s := newSim(t, deploy("a"))
	older(&s.snap)
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, BlockedPrecheck, d.Status.BlockedKind)
	assert.Equal(t, "precheck failed: 1-26's proxy (1.24.6, from istiod image docker.io/istio/pilot:1.24.6) is older than 1-25's (1.25.2, from istiod image docker.io/istio/pilot:1.25.2): a downgrade; set meshwave.io/allow-downgrade=true on the namespace to allow it", d.Status.Reason)
	assert.Empty(t, d.Label)
	assert.Empty(t, d.Moves)
	assert.Zero(t, d.RequeueAfter)

	s.snap.Namespace.Annotations[AnnotationAllowDowngrade] = "true"
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, "1-26", d.Label)
	assert.Equal(t, []string{"a downgrade, allowed by meshwave.io/allow-downgrade=true: 1-26's proxy (1.24.6, from istiod image docker.io/istio/pilot:1.24.6) is older than 1-25's (1.25.2, from istiod image docker.io/istio/pilot:1.25.2)"}, d.Status.Warnings)

	s = newSim(t, deploy("a"))
	older(&s.snap)
	s.snap.Namespace.Annotations[AnnotationAllowDowngrade] = "yes"
	d = s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, `invalid input: meshwave.io/allow-downgrade on namespace shop: "yes" is not "true" or "false"`, d.Status.Reason)
}

func TestAnUpgradeOrAnUnknownVersionIsNoDowngrade(t *testing.T) {
	s := newSim(t, deploy("a"))
	versioned(&s.snap)
	assert.Equal(t, PhaseMigrating, s.decide(nil).Status.Phase)
	s = newSim(t, deploy("a"))
	assert.Equal(t, PhaseMigrating, s.decide(nil).Status.Phase, "revisions of unknown versions")
}

func TestStrictPrechecksTurnCompatibilityWarningsIntoABlock(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("solo", replicas(1)))
	s.cfg.StrictPrechecks = true
	versioned(&s.snap)
	s.snap.Compat.EnvoyFilters = []EnvoyFilter{filter("istio-system", "lua", nil, `^1\.25`)}
	s.snap.Compat.Telemetries = []Telemetry{{Namespace: "shop", Name: "payments", MatchLabels: map[string]string{"team": "payments"}}}
	d := s.decide(nil)
	require.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, BlockedPrecheck, d.Status.BlockedKind)
	lua := `EnvoyFilter istio-system/lua: proxyVersion "^1\\.25" matches 1-25's proxies (1.25.2) but not 1-26's (1.26.1): its patch stops applying to the moved workloads; widen the regex or add a patch for 1.26.1`
	telemetry := "Telemetry shop/payments: selector.matchLabels team=payments names labels no moved workload's template carries (team=payments absent): it applies to none of them; check the selector"
	assert.Equal(t, "precheck failed: prechecks.strict: "+lua+" (and 1 more in the status's warnings)", d.Status.Reason)
	assert.Equal(t, []string{lua, telemetry}, d.Status.Warnings, "a single replica is no compatibility warning, and does not block")
	assert.Empty(t, d.Label)
	assert.Empty(t, d.Moves)
	assert.Equal(t, []Event{{Type: EventWarning, Reason: "PrecheckFailed", Message: "prechecks.strict: " + lua + " (and 1 more in the status's warnings)"}}, d.Events)

	// Fixed, the namespace starts, with the remaining warning.
	s.snap.Compat.EnvoyFilters = nil
	s.snap.Compat.Telemetries = nil
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, []string{"deployment solo has one replica and no PodDisruptionBudget: it is unavailable while it restarts"}, d.Status.Warnings)
}

func TestWarningsAreBoundedWithTheCompatibilityOnesFirst(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("solo", replicas(1)))
	versioned(&s.snap)
	for i := 0; i < 12; i++ {
		s.snap.Compat.EnvoyFilters = append(s.snap.Compat.EnvoyFilters, filter("shop", string(rune('a'+i)), nil, `^1\.8`))
	}
	d := s.decide(nil)
	require.Len(t, d.Status.Warnings, maxWarnings)
	assert.Contains(t, d.Status.Warnings[0], "EnvoyFilter shop/a:")
	assert.Equal(t, "and 4 more", d.Status.Warnings[maxWarnings-1])
}

func TestVersions(t *testing.T) {
	for image, want := range map[string]string{
		"docker.io/istio/pilot:1.26.1":                 "1.26.1",
		"gcr.io/istio-release/pilot:1.26.1-distroless": "1.26.1",
		"localhost:5000/istio/pilot:1.31-dev":          "1.31-dev",
		"docker.io/istio/pilot:latest":                 "",
		"localhost:5000/istio/pilot":                   "",
		"docker.io/istio/pilot@sha256:0123":            "",
	} {
		assert.Equal(t, want, VersionFromImage(image), image)
	}
	for rev, want := range map[string]string{"1-26": "1.26", "1-26-1": "1.26.1", "default-v1-26-0": "1.26.0", "canary": "", "prod-stable": ""} {
		assert.Equal(t, want, VersionFromRevision(rev), rev)
	}
	for _, c := range []struct {
		a, b string
		cmp  int
		ok   bool
	}{
		{"1.26.1", "1.26.0", 1, true}, {"1.9.0", "1.26.0", -1, true}, {"1.26", "1.26.3", 0, true},
		{"1.31-dev", "1.30.2", 1, true}, {"", "1.26.0", 0, false}, {"latest", "1.26.0", 0, false},
	} {
		cmp, ok := CompareVersions(c.a, c.b)
		assert.Equal(t, c.cmp, cmp, c.a+" vs "+c.b)
		assert.Equal(t, c.ok, ok, c.a+" vs "+c.b)
	}
}

func TestASailGracePeriodTooLongForADurationIsLongEnough(t *testing.T) {
	huge := int64(math.MaxInt64)
	warnings := sailWarnings([]SailIstio{{Name: "default", UpdateStrategy: "RevisionBased", GracePeriodSeconds: &huge}}, 3, "1-25", Config{})
	assert.Empty(t, warnings, "a grace period of %d s outlasts any migration", huge)
	tenYears := int64(10 * 365 * 24 * 3600)
	assert.Empty(t, sailWarnings([]SailIstio{{Name: "default", UpdateStrategy: "RevisionBased", GracePeriodSeconds: &tenYears}}, 3, "1-25", Config{}))
	overflow := int64(math.MaxInt64/int64(time.Second)) + 1
	assert.Empty(t, sailWarnings([]SailIstio{{Name: "default", UpdateStrategy: "RevisionBased", GracePeriodSeconds: &overflow}}, 3, "1-25", Config{}))
}
