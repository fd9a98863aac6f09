// Package agent runs meshwave's controller: it gathers a snapshot of opted-in
// namespaces from shared informers, asks package canary what to do next, and
// acts on the cluster with merge patches, status annotations and Events.
package agent
