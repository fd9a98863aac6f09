package canary

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Compat holds the mesh resources that may behave differently once a
// namespace's proxies run the target: what the compatibility prechecks
// read. A kind whose CRD the cluster does not serve is simply empty.
type Compat struct {
	// EnvoyFilters are the namespace's and the root namespace's: one in
	// the root namespace applies to every namespace.
	EnvoyFilters []EnvoyFilter
	// Telemetries are the namespace's.
	Telemetries []Telemetry
	// SailIstios are the Sail Operator's Istio resources (cluster-scoped).
	SailIstios []SailIstio
	// PeerAuthentications and AuthorizationPolicies are the namespace's
	// and the root namespace's, for the move to ambient's precheck.
	PeerAuthentications   []PeerAuthentication
	AuthorizationPolicies []AuthorizationPolicy
	// Unread names the security kinds that could not be read, and why:
	// the move to ambient waits for them.
	Unread []string
	// Gateways are the namespace's Gateway API Gateways, for its
	// waypoint; GatewayAPI says whether the cluster serves them at all.
	Gateways   []Gateway
	GatewayAPI bool
	// SubsetRoutes are the namespace's VirtualServices that route to a
	// subset, and its DestinationRules that define subsets.
	SubsetRoutes []SubsetRoute
}

// SubsetRoute is a networking.istio.io VirtualService that routes to
// subsets, or a DestinationRule that defines them.
type SubsetRoute struct {
	Kind, Namespace, Name string
	// Subsets are the subsets' names, in order, each once.
	Subsets []string
}

// gateway is the namespace's Gateway name, if it has one.
func (c Compat) gateway(name string) (Gateway, bool) {
	i := slices.IndexFunc(c.Gateways, func(g Gateway) bool { return g.Name == name })
	if i < 0 {
		return Gateway{}, false
	}
	return c.Gateways[i], true
}

// Gateway is the part of a gateway.networking.k8s.io Gateway the waypoint
// step reads.
type Gateway struct {
	Namespace, Name string
	// Class is spec.gatewayClassName.
	Class string
	// Revision is its istio.io/rev label, "" when it has none (the
	// namespace's revision then deploys it).
	Revision string
	// For is its istio.io/waypoint-for label, "" when it has none.
	For string
	// Programmed is its Programmed condition's status; ProgrammedWhy the
	// condition's reason and message when it is not True.
	Programmed    bool
	ProgrammedWhy string
}

// EnvoyFilter is the part of a networking.istio.io EnvoyFilter the
// prechecks read.
type EnvoyFilter struct {
	Namespace string
	Name      string
	// WorkloadSelector is spec.workloadSelector.labels; empty selects every
	// proxy in the filter's scope.
	WorkloadSelector map[string]string
	// ProxyVersions are the configPatches' match.proxy.proxyVersion, in
	// order; patches without one are left out.
	ProxyVersions []string
}

// Telemetry is the part of a telemetry.istio.io Telemetry the prechecks
// read.
type Telemetry struct {
	Namespace string
	Name      string
	// MatchLabels is spec.selector.matchLabels.
	MatchLabels map[string]string
}

// SailIstio is the part of a sailoperator.io Istio resource the prechecks
// read.
type SailIstio struct {
	Name string
	// UpdateStrategy is spec.updateStrategy.type: InPlace or RevisionBased.
	UpdateStrategy string
	// GracePeriodSeconds is
	// spec.updateStrategy.inactiveRevisionDeletionGracePeriodSeconds; nil
	// when unset, and Sail's default applies.
	GracePeriodSeconds *int64
}

// DefaultSailGracePeriod is Sail's inactiveRevisionDeletionGracePeriodSeconds
// when unset: a revision no workload uses is deleted 30 s later.
const DefaultSailGracePeriod = 30 * time.Second

// compatWarnings are the resources that behave differently on the target,
// for the workloads the plan moves: the warnings prechecks.strict turns
// into a block.
func compatWarnings(m *machine, plan NamespacePlan, sourceRev string) []string {
	moved := plannedWorkloads(m, plan)
	if len(moved) == 0 {
		return nil
	}
	source := m.snap().Mesh.Revisions[sourceRev]
	source.Name = sourceRev
	target := m.snap().Mesh.Revisions[m.st.TargetRevision]
	target.Name = m.st.TargetRevision
	var out []string
	out = append(out, envoyFilterWarnings(m.snap().Compat.EnvoyFilters, moved, source, target)...)
	out = append(out, telemetryWarnings(m.snap().Compat.Telemetries, moved, m.snap().Workloads)...)
	out = append(out, sailWarnings(m.snap().Compat.SailIstios, len(plan.Waves), sourceRev, m.cfg)...)
	if m.st.Mode == ModeAmbient {
		out = append(out, subsetWarnings(m)...)
	}
	return out
}

// plannedWorkloads are the workloads of the plan's waves.
func plannedWorkloads(m *machine, plan NamespacePlan) []Workload {
	var out []Workload
	for _, wave := range plan.Waves {
		for _, p := range wave {
			if w, ok := m.workloads().find(p.Name); ok {
				out = append(out, *w.Workload)
			}
		}
	}
	return out
}

// envoyFilterWarnings compares each proxyVersion regex of the filters that
// select a moved workload with the source's and the target's proxy
// versions. istiod matches it, unanchored, against the ISTIO_VERSION a
// proxy reports (pilot/pkg/model/envoyfilter.go, proxyMatch): `^1\.25`
// matches 1.25.2 and not 1.26.1, and a proxy without a version matches
// no regex.
func envoyFilterWarnings(filters []EnvoyFilter, moved []Workload, source, target Revision) []string {
	var out []string
	for _, f := range filters {
		if len(f.ProxyVersions) == 0 || !selectsAny(f.WorkloadSelector, moved) {
			continue
		}
		seen := map[string]bool{}
		for _, expr := range f.ProxyVersions {
			if seen[expr] {
				continue
			}
			seen[expr] = true
			if w := proxyVersionWarning(f, expr, source, target); w != "" {
				out = append(out, w)
			}
		}
	}
	return out
}

func proxyVersionWarning(f EnvoyFilter, expr string, source, target Revision) string {
	name := fmt.Sprintf("EnvoyFilter %s/%s: proxyVersion %q", f.Namespace, f.Name, expr)
	re, err := regexp.Compile(expr)
	if err != nil {
		return fmt.Sprintf("%s is not a valid regular expression, so its patch matches no proxy: fix the regex", name)
	}
	if target.ProxyVersion == "" {
		return fmt.Sprintf("%s cannot be checked: the proxy version of %s is unknown (no istiod image tag or revision name gives it); check the regex against its ISTIO_VERSION by hand", name, target.Name)
	}
	tgt := re.MatchString(target.ProxyVersion)
	if source.ProxyVersion == "" {
		if tgt {
			return ""
		}
		return fmt.Sprintf("%s does not match %s's proxies (%s): its patch does not apply to the moved workloads; check the regex", name, target.Name, target.ProxyVersion)
	}
	src := re.MatchString(source.ProxyVersion)
	switch {
	case src && !tgt:
		return fmt.Sprintf("%s matches %s's proxies (%s) but not %s's (%s): its patch stops applying to the moved workloads; widen the regex or add a patch for %s", name, source.Name, source.ProxyVersion, target.Name, target.ProxyVersion, target.ProxyVersion)
	case !src && tgt:
		return fmt.Sprintf("%s does not match %s's proxies (%s) but matches %s's (%s): its patch starts applying to the moved workloads; check that it suits %s", name, source.Name, source.ProxyVersion, target.Name, target.ProxyVersion, target.ProxyVersion)
	case !src && !tgt:
		return fmt.Sprintf("%s matches neither %s's proxies (%s) nor %s's (%s): its patch applies to no proxy of these workloads (istio/istio#26818); check the regex against ISTIO_VERSION", name, source.Name, source.ProxyVersion, target.Name, target.ProxyVersion)
	}
	return ""
}

// selectsAny reports whether a workload selector selects one of the
// workloads' templates; an empty selector selects them all.
func selectsAny(selector map[string]string, ws []Workload) bool {
	if len(selector) == 0 {
		return true
	}
	for _, w := range ws {
		if subset(selector, w.TemplateLabels) {
			return true
		}
	}
	return false
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// telemetryWarnings finds the Telemetries whose selector.matchLabels a
// moved workload's template does not carry. A restart replaces the pods
// with the template's: a selector that matches today's pods through labels
// only they carry (set by hand, or by a webhook) stops applying, and one
// that matches no template in the namespace applies to none of the moved
// workloads. A selector that matches a template the plan leaves alone is
// about that workload, and is not reported.
func telemetryWarnings(ts []Telemetry, moved, all []Workload) []string {
	var out []string
	for _, t := range ts {
		if len(t.MatchLabels) == 0 {
			continue
		}
		name := fmt.Sprintf("Telemetry %s/%s: selector.matchLabels %s", t.Namespace, t.Name, labelList(t.MatchLabels))
		var podsOnly []string
		for _, w := range moved {
			if subset(t.MatchLabels, w.TemplateLabels) {
				continue
			}
			for _, p := range w.livePods() {
				if subset(t.MatchLabels, p.Labels) {
					podsOnly = append(podsOnly, describe(w.Name))
					break
				}
			}
		}
		if len(podsOnly) > 0 {
			out = append(out, fmt.Sprintf("%s selects the pods of %s through labels their template lacks (%s): it stops applying once they restart; add the labels to the template", name, strings.Join(podsOnly, ", "), labelList(absentFrom(t.MatchLabels, moved))))
			continue
		}
		if selectsAny(t.MatchLabels, all) {
			continue
		}
		out = append(out, fmt.Sprintf("%s names labels no moved workload's template carries (%s absent): it applies to none of them; check the selector", name, labelList(absentFrom(t.MatchLabels, moved))))
	}
	return out
}

// absentFrom are the selector's pairs that none of the templates carries,
// or the whole selector when each pair is on some template.
func absentFrom(sel map[string]string, ws []Workload) map[string]string {
	out := map[string]string{}
	for k, v := range sel {
		found := false
		for _, w := range ws {
			if got, ok := w.TemplateLabels[k]; ok && got == v {
				found = true
				break
			}
		}
		if !found {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return sel
	}
	return out
}

func labelList(m map[string]string) string {
	pairs := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, k+"="+m[k])
	}
	return strings.Join(pairs, ",")
}

// MigrationEstimate is the longest a migration of n waves should take:
// each wave's readiness timeout, bake time and further metric runs, and
// the delay after it. With the defaults and metric checks, 3 waves ×
// (5m + 1m + 1 × 30s + 30s) = 21m.
func MigrationEstimate(waves int, cfg Config) time.Duration {
	cfg = cfg.WithDefaults()
	perWave := cfg.ReadinessTimeout + cfg.DelayBetweenWaves
	if cfg.MetricChecks {
		perWave += cfg.BakeTime + time.Duration(cfg.RequiredPasses-1)*cfg.AnalysisInterval
	}
	return time.Duration(waves) * perWave
}

// sailWarnings finds the Sail Operator Istio resources that would delete
// the source revision while a rollback may still need it. Under the
// RevisionBased strategy Sail deletes a revision no workload uses once
// inactiveRevisionDeletionGracePeriodSeconds have passed
// (pkg/revision/prune.go): when the last wave leaves the source, a grace
// shorter than the migration takes leaves no revision to roll back to.
// InPlace upgrades keep one revision, which nothing deletes.
func sailWarnings(istios []SailIstio, waves int, sourceRev string, cfg Config) []string {
	estimate := MigrationEstimate(waves, cfg)
	var out []string
	for _, is := range istios {
		if is.UpdateStrategy != "RevisionBased" {
			continue
		}
		grace, how := DefaultSailGracePeriod, "30 (the default)"
		if g := is.GracePeriodSeconds; g != nil {
			if *g > int64(math.MaxInt64/time.Second) {
				// Longer than a Duration holds (292 years): multiplied,
				// it would wrap round to a short or negative one.
				continue
			}
			grace, how = time.Duration(*g)*time.Second, strconv.FormatInt(*g, 10)
		}
		if grace >= estimate {
			continue
		}
		out = append(out, fmt.Sprintf("Istio %s: spec.updateStrategy.inactiveRevisionDeletionGracePeriodSeconds is %s, shorter than this migration may take (%d waves, up to %s): Sail deletes %s once no workload uses it, before a rollback could return to it; raise it to at least %d",
			is.Name, how, waves, estimate, sourceRev, int64(estimate/time.Second)))
	}
	return out
}

// downgrade says why moving from source to target is a downgrade that the
// namespace has not allowed ("" when it is not one, or is allowed), and
// notes an allowed one.
func downgrade(m *machine, sourceRev string) (reason, note string) {
	src, tgt := m.snap().Mesh.Revisions[sourceRev], m.snap().Mesh.Revisions[m.st.TargetRevision]
	cmp, ok := CompareVersions(tgt.ProxyVersion, src.ProxyVersion)
	if !ok || cmp >= 0 {
		return "", ""
	}
	what := fmt.Sprintf("%s's proxy (%s, from %s) is older than %s's (%s, from %s)", m.st.TargetRevision, tgt.ProxyVersion, tgt.VersionFrom, sourceRev, src.ProxyVersion, src.VersionFrom)
	if m.settings.AllowDowngrade {
		return "", fmt.Sprintf("a downgrade, allowed by %s=true: %s", AnnotationAllowDowngrade, what)
	}
	return fmt.Sprintf("%s: a downgrade; set %s=true on the namespace to allow it", what, AnnotationAllowDowngrade), ""
}

// CompareVersions compares two Istio versions by their numbers: -1 when a
// is older, 0 when equal as far as both go ("1.26" and "1.26.1"), 1 when
// newer. ok is false when either is not a version.
func CompareVersions(a, b string) (int, bool) {
	na, nb := versionNumbers(a), versionNumbers(b)
	if na == nil || nb == nil {
		return 0, false
	}
	for i := 0; i < len(na) && i < len(nb); i++ {
		if na[i] != nb[i] {
			if na[i] < nb[i] {
				return -1, true
			}
			return 1, true
		}
	}
	return 0, true
}

// versionNumbers reads the leading "major.minor[.patch]" of a version:
// "1.26.1" is [1 26 1], "1.31-dev" is [1 31]; nil when it has no minor.
func versionNumbers(v string) []int {
	end := strings.IndexFunc(v, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
	if end >= 0 {
		v = v[:end]
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return nil
	}
	var out []int
	for _, p := range parts[:min(len(parts), 3)] {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// VersionFromImage reads the Istio version from an image's tag, as the
// proxy reports it in ISTIO_VERSION: "docker.io/istio/pilot:1.26.1-distroless"
// is "1.26.1". "" when the tag is not a version (latest, a digest only).
func VersionFromImage(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return ""
	}
	tag := image[i+1:]
	for _, variant := range []string{"-distroless", "-debug"} {
		tag = strings.TrimSuffix(tag, variant)
	}
	if versionNumbers(tag) == nil {
		return ""
	}
	return tag
}

// revisionVersion matches a revision named after its version: "1-26",
// "1-26-1", or Sail's "default-v1-26-1".
var revisionVersion = regexp.MustCompile(`(?:^|-)v?(\d+)-(\d+)(?:-(\d+))?$`)

// VersionFromRevision reads the version a revision's name gives: "1-26" is
// "1.26", "default-v1-26-1" is "1.26.1"; "" for another name.
func VersionFromRevision(name string) string {
	m := revisionVersion.FindStringSubmatch(name)
	if m == nil {
		return ""
	}
	if m[3] == "" {
		return m[1] + "." + m[2]
	}
	return m[1] + "." + m[2] + "." + m[3]
}
