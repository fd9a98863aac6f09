package canary

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// The fuzz targets feed meshwave's inputs with anything: the status and
// move records it reads back, and the annotations people write. None may
// panic, and no decision may restart a workload twice for one move.
// Seeds are in testdata/fuzz; `make fuzz` runs each briefly.

func FuzzParseStatus(f *testing.F) {
	f.Add(validStatus)
	f.Add(`{"phase":"Completed","target":"1-26","targetRevision":"1-26","wave":0,"totalWaves":0,"counts":{"total":0,"pending":0,"moving":0,"moved":0,"failed":0,"skipped":0}}`)
	f.Add(`{"phase":"Migrating","Phase":"Paused"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		st, ok, err := ParseStatus(map[string]string{AnnotationStatus: raw})
		if !ok {
			t.Fatal("a present annotation is reported absent")
		}
		if err != nil {
			if st != nil {
				t.Fatal("an unreadable status is returned")
			}
			return
		}
		if err := st.Validate(); err != nil {
			t.Fatalf("an accepted status does not validate: %v", err)
		}
		enc, err := st.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := ParseStatus(map[string]string{AnnotationStatus: enc})
		if err != nil {
			t.Fatalf("an accepted status does not read back once encoded: %v\n%s", err, enc)
		}
		if !back.Equal(st) {
			t.Fatalf("the status changed on a round trip:\n%s", enc)
		}
	})
}

func FuzzReadMoveRecord(f *testing.F) {
	f.Add(`{"revision":"1-26","from":"1-25","wave":1,"at":"2026-11-29T12:00:00Z","migration":"1-26@2026-11-29T12:00:00Z"}`)
	f.Add(`{"revision":"1-25","from":"1-26","sourceLabel":"stable","wave":2,"at":"2026-11-29T12:00:00Z","rollback":true,"migration":"1-26@2026-11-29T12:00:00Z"}`)
	f.Add(`{"revision":"1-26","wave":0}`)
	f.Fuzz(func(t *testing.T, raw string) {
		r, ok := ReadMoveRecord(map[string]string{AnnotationMove: raw})
		if !ok {
			return
		}
		back, ok := ReadMoveRecord(map[string]string{AnnotationMove: r.Encode()})
		if !ok || !reflect.DeepEqual(back, r) {
			t.Fatalf("an accepted record does not read back once encoded: %+v", r)
		}
		if _, _, ok := ParseMigrationID(r.Migration); !ok || r.Wave < 1 {
			t.Fatalf("an accepted record names no migration or wave: %+v", r)
		}
	})
}

func FuzzAnnotations(f *testing.F) {
	f.Add("1-26", "10", "true", "wave", "RollbackWave", "0", "false", "5m")
	f.Add("", "-1000001", "yes", "some", "Halt", "-1", "TRUE", "0s")
	f.Fuzz(func(t *testing.T, target, priority, paused, rollback, policy, wave, skip, timeout string) {
		ns := map[string]string{AnnotationTargetRevision: target, AnnotationPriority: priority, AnnotationPaused: paused,
			AnnotationRollback: rollback, AnnotationFailurePolicy: policy}
		s, errs := ParseNamespace("shop", ns)
		for _, e := range errs {
			if !strings.HasPrefix(e.Error(), e.Key+" on namespace shop: ") {
				t.Fatalf("an error does not name its key and object: %v", e)
			}
		}
		if len(errs) == 0 && (s.Target == "" || s.Priority < -1_000_000 || s.Priority > 1_000_000) {
			t.Fatalf("accepted settings out of range: %+v", s)
		}
		w, werrs := ParseWorkload("shop", "cart", map[string]string{AnnotationWave: wave, AnnotationSkip: skip, AnnotationReadinessTimeout: timeout})
		for _, e := range werrs {
			if !strings.HasPrefix(e.Error(), e.Key+" on deployment shop/cart: ") {
				t.Fatalf("an error does not name its key and object: %v", e)
			}
		}
		if len(werrs) == 0 && (w.Wave < 0 || w.ReadinessTimeout <= 0) {
			t.Fatalf("accepted settings out of range: %+v", w)
		}
	})
}

// FuzzDecide decides on a namespace mid-migration whatever its status and
// the annotations say, and checks that no workload that already carries a
// forward move to the target is moved to it again.
func FuzzDecide(f *testing.F) {
	f.Add(validStatus, "0", "false", "2m", "")
	f.Add(`{"phase":"Pending","target":"1-26","wave":0,"totalWaves":0,"counts":{"total":0,"pending":0,"moving":0,"moved":0,"failed":0,"skipped":0}}`, "1", "true", "x", "wave")
	f.Add(`{`, "", "", "", "all")
	f.Fuzz(func(t *testing.T, raw, wave, skip, timeout, rollback string) {
		a := deploy("a", onRevision("1-26"), ann(AnnotationMove, `{"revision":"1-26","from":"1-25","wave":1,"at":"2026-11-29T12:00:00Z","migration":"1-26@2026-11-29T12:00:00Z"}`))
		b := deploy("b", ann(AnnotationMove, `{"revision":"1-26","from":"1-25","wave":2,"at":"2026-11-29T12:05:00Z","migration":"1-26@2026-11-29T12:00:00Z"}`))
		c := deploy("c", ann(AnnotationWave, wave), ann(AnnotationSkip, skip), ann(AnnotationReadinessTimeout, timeout))
		snap := snap(a, b, c)
		snap.Namespace.Labels[LabelRev] = "1-26"
		if rollback != "" {
			snap.Namespace.Annotations[AnnotationRollback] = rollback
		}
		st, _, err := ParseStatus(map[string]string{AnnotationStatus: raw})
		in := Input{Snapshot: snap, Status: st, StatusErr: err, Now: t0.Add(10 * time.Minute)}
		if w, ok := waveToVerify(snap, st, in.Config); ok {
			for range w.Workloads {
				in.Verdicts = []Verdict{{Gate: "rollout", Result: ResultPass, Reason: "ok"}}
			}
		}
		d := decideBothWays(t, in)
		for _, m := range d.Moves {
			if m.Record.Rollback {
				continue
			}
			if m.Workload == "a" || m.Workload == "b" {
				t.Fatalf("%s, already moved to 1-26, is moved again: status %s", m.Workload, raw)
			}
		}
		if d.Status != nil {
			if err := d.Status.Validate(); err != nil {
				t.Fatalf("meshwave would write a status it cannot read back: %v", err)
			}
		}
	})
}
