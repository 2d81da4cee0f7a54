// Command barecontroller is the benchmark's compiled reference controller: it watches the
// SessionRequests of one namespace and, for each new one, writes the status the operator
// would write for a precomputed host (round robin over the pool's hosts), with a bounded
// number of writes in flight. No cache, no decision, no pool or host status; HTTP/2 over one
// connection, as client-go does, or with --http1 HTTP/1.1 over a connection per write in
// flight, as the operator does. It shows how fast a controller with nothing to decide can
// place a storm on this API server and machine, so the operator's latency can be read
// against it.
//
// Standard library only, so the bench builds it from this directory with no downloads.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const groupVersion = "hostpool.io/v1alpha1"

type objectMeta struct {
	Name            string `json:"name"`
	Namespace       string `json:"namespace,omitempty"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Generation      int64  `json:"generation,omitempty"`
}

type watchEvent struct {
	Type   string `json:"type"`
	Object struct {
		Metadata objectMeta `json:"metadata"`
		Status   struct {
			Phase string `json:"phase"`
		} `json:"status"`
	} `json:"object"`
}

type condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	LastTransitionTime string `json:"lastTransitionTime"`
	ObservedGeneration int64  `json:"observedGeneration"`
}

// status is the operator's status for a new session: the same fields, the same shape.
type status struct {
	ObservedGeneration int64       `json:"observedGeneration"`
	Phase              string      `json:"phase"`
	Host               string      `json:"host"`
	Reason             string      `json:"reason"`
	Message            string      `json:"message"`
	SessionState       string      `json:"sessionState"`
	AssignedAt         string      `json:"assignedAt"`
	Conditions         []condition `json:"conditions"`
}

type statusBody struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Status     status     `json:"status"`
}

type controller struct {
	client    *http.Client
	server    string
	token     string
	namespace string
	hosts     int
	slots     chan struct{}
	writes    sync.WaitGroup
	placed    int
	errors    atomic.Int64
	mu        sync.Mutex
	examples  []string
}

func (c *controller) request(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	return c.client.Do(req)
}

func (c *controller) fail(format string, args ...any) {
	c.errors.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.examples) < 20 {
		c.examples = append(c.examples, fmt.Sprintf(format, args...))
	}
}

func (c *controller) assign(meta objectMeta, host string) {
	defer c.writes.Done()
	c.slots <- struct{}{}
	defer func() { <-c.slots }()
	now := time.Now().UTC().Format(time.RFC3339)
	message := "new session on " + host
	generation := meta.Generation
	if generation == 0 {
		generation = 1
	}
	body, err := json.Marshal(statusBody{
		APIVersion: groupVersion,
		Kind:       "SessionRequest",
		Metadata: objectMeta{
			Name: meta.Name, Namespace: c.namespace, UID: meta.UID, ResourceVersion: meta.ResourceVersion,
		},
		Status: status{
			ObservedGeneration: generation,
			Phase:              "Assigned",
			Host:               host,
			Reason:             "NewSession",
			Message:            message,
			SessionState:       "Connecting",
			AssignedAt:         now,
			Conditions: []condition{{
				Type: "Assigned", Status: "True", Reason: "NewSession", Message: message,
				LastTransitionTime: now, ObservedGeneration: generation,
			}},
		},
	})
	if err != nil {
		c.fail("%s: %v", meta.Name, err)
		return
	}
	path := fmt.Sprintf("/apis/%s/namespaces/%s/sessionrequests/%s/status", groupVersion, c.namespace, meta.Name)
	resp, err := c.request(context.Background(), http.MethodPut, path, body)
	if err != nil {
		c.fail("%s: %v", meta.Name, err)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		c.fail("%s: HTTP %d: %.200s", meta.Name, resp.StatusCode, answer)
	}
}

// watch places every new request the watch delivers; it returns when the context ends.
func (c *controller) watch(ctx context.Context) {
	rv := "0"
	announced := false
	for ctx.Err() == nil {
		query := url.Values{"watch": {"true"}, "resourceVersion": {rv}, "allowWatchBookmarks": {"true"}}
		path := fmt.Sprintf("/apis/%s/namespaces/%s/sessionrequests?%s", groupVersion, c.namespace, query.Encode())
		resp, err := c.request(ctx, http.MethodGet, path, nil)
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		if !announced {
			fmt.Println("bare controller watching")
			announced = true
		}
		decoder := json.NewDecoder(resp.Body)
		for {
			var event watchEvent
			if err := decoder.Decode(&event); err != nil {
				break
			}
			if event.Object.Metadata.ResourceVersion != "" {
				rv = event.Object.Metadata.ResourceVersion
			}
			if event.Type != "ADDED" || event.Object.Status.Phase != "" {
				continue
			}
			host := fmt.Sprintf("host%05d", c.placed%c.hosts)
			c.placed++
			c.writes.Add(1)
			go c.assign(event.Object.Metadata, host)
		}
		resp.Body.Close()
	}
}

func main() {
	server := flag.String("server", "", "API server URL")
	caFile := flag.String("ca", "", "PEM file of the API server's CA")
	namespace := flag.String("namespace", "", "namespace to watch")
	hosts := flag.Int("hosts", 1, "hosts to place on, named host00000...")
	inFlight := flag.Int("write-concurrency", 128, "status writes in flight at most")
	out := flag.String("out", "", "where to write the result (JSON)")
	http1 := flag.Bool("http1", false, "HTTP/1.1 over a pool of connections instead of HTTP/2 over one")
	flag.Parse()
	token := os.Getenv("BARE_CONTROLLER_TOKEN") // not a flag: flags show in ps
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "barecontroller:", err)
		os.Exit(2)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		fmt.Fprintln(os.Stderr, "barecontroller: no certificate in", *caFile)
		os.Exit(2)
	}
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: !*http1,
	}
	if *http1 {
		// As the Python clients do: one connection per request in flight, kept alive.
		transport.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		transport.MaxIdleConnsPerHost = *inFlight + 1
	}
	c := &controller{
		client:    &http.Client{Transport: transport},
		server:    *server,
		token:     token,
		namespace: *namespace,
		hosts:     *hosts,
		slots:     make(chan struct{}, *inFlight),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c.watch(ctx)
	c.writes.Wait()
	result, _ := json.Marshal(map[string]any{
		"placed": c.placed, "errorCount": c.errors.Load(), "errors": c.examples,
	})
	if err := os.WriteFile(*out, result, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "barecontroller:", err)
		os.Exit(1)
	}
}
