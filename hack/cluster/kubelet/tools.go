//go:build tools

// Package tools pins the kubelet that hack/cluster/tools.sh --kubelet builds from this module
// (k8s.io/kubernetes at the same version as hack/cluster/k8s, for real nodes).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
