// Command memberlist-peer is one member of a hashicorp/memberlist group configured as MetalLB's
// speaker configures it (memberlist.DefaultLANConfig, the secret hashed as MetalLB hashes it),
// speaking the standalone ironlb member's command line and stdout, so that bench.membership runs
// it in the same namespaces, under the same faults, and judges it by the same rules.
//
//	memberlist-peer --name m1 --bind 10.231.0.1:7946 --seed 10.231.0.2:7946 \
//	    --key-file key [--drop-rate 0.02]
//
// stdout: JSON lines stamped with CLOCK_MONOTONIC (the clock every process on the host shares):
// {"t":..., "event":"started"|"member"|"health"|"stopped", ...}. A member event's "incarnation"
// is this observer's count of the subject's earlier lives (memberlist does not expose
// incarnation numbers); "state" is alive or dead (memberlist's event delegate does not tell a
// leave from a death, nor report suspicion). SIGTERM: Leave(1s) and Shutdown, as MetalLB's
// speaker does.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"golang.org/x/sys/unix"
)

type seeds []string

func (s *seeds) String() string     { return strings.Join(*s, ",") }
func (s *seeds) Set(v string) error { *s = append(*s, v); return nil }

// printer writes one JSON object per line, stamped with the monotonic clock.
type printer struct {
	mu  sync.Mutex
	out *bufio.Writer
}

func monotonic() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

func (p *printer) event(fields map[string]any) {
	fields["t"] = monotonic()
	line, err := json.Marshal(fields)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out.Write(line)
	p.out.WriteByte('\n')
	p.out.Flush()
}

// events is memberlist's EventDelegate: called with memberlist's node lock held, so it only
// counts and prints.
type events struct {
	self  string
	print *printer
	mu    sync.Mutex
	lives map[string]int
}

func (e *events) report(n *memberlist.Node, state string, newLife bool) {
	if n.Name == e.self {
		return
	}
	e.mu.Lock()
	if newLife {
		e.lives[n.Name]++
	}
	life := e.lives[n.Name] - 1
	e.mu.Unlock()
	e.print.event(map[string]any{
		"event": "member", "node": e.self, "member": n.Name, "state": state, "incarnation": life,
	})
}

func (e *events) NotifyJoin(n *memberlist.Node)   { e.report(n, "alive", true) }
func (e *events) NotifyLeave(n *memberlist.Node)  { e.report(n, "dead", false) }
func (e *events) NotifyUpdate(n *memberlist.Node) {}

// lossyTransport drops a fraction of the datagrams received, before memberlist sees them: the
// same loss the ironlb member's --drop-rate injects (this kernel has no netem). Streams (TCP)
// are left alone, as a lossy link would only slow them.
type lossyTransport struct {
	*memberlist.NetTransport
	packets chan *memberlist.Packet
}

func newLossy(inner *memberlist.NetTransport, rate float64) *lossyTransport {
	t := &lossyTransport{NetTransport: inner, packets: make(chan *memberlist.Packet)}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	go func() {
		for p := range inner.PacketCh() {
			if rng.Float64() < rate {
				continue
			}
			t.packets <- p
		}
	}()
	return t
}

func (t *lossyTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func main() {
	name := flag.String("name", "", "member name")
	bind := flag.String("bind", "0.0.0.0:7946", "address:port to bind (UDP and TCP)")
	var seedList seeds
	flag.Var(&seedList, "seed", "a member to join through (repeatable)")
	keyFile := flag.String("key-file", "", "file whose first line is the shared secret")
	dropRate := flag.Float64("drop-rate", 0, "fraction of received datagrams to drop (test hook)")
	flag.Parse()
	if *name == "" {
		fmt.Fprintln(os.Stderr, "--name is required")
		os.Exit(2)
	}
	host, portText, err := net.SplitHostPort(*bind)
	if err != nil {
		fmt.Fprintln(os.Stderr, "--bind:", err)
		os.Exit(2)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		fmt.Fprintln(os.Stderr, "--bind:", err)
		os.Exit(2)
	}
	print := &printer{out: bufio.NewWriter(os.Stdout)}
	logger := log.New(os.Stderr, "", log.LstdFlags)

	// MetalLB's speaker (internal/speakerlist): DefaultLANConfig, name, bind address and port,
	// the secret through sha256.New().Sum(secret)[:32], a channel event delegate.
	config := memberlist.DefaultLANConfig()
	config.Name = *name
	config.BindAddr = host
	config.BindPort = port
	config.AdvertisePort = port
	config.Logger = logger
	if *keyFile != "" {
		raw, err := os.ReadFile(*keyFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "--key-file:", err)
			os.Exit(2)
		}
		secret := strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0])
		sha := sha256.New()
		config.SecretKey = sha.Sum([]byte(secret))[:32]
	}
	config.Events = &events{self: *name, print: print, lives: map[string]int{}}
	if *dropRate > 0 {
		inner, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{host}, BindPort: port, Logger: logger,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "transport:", err)
			os.Exit(1)
		}
		config.Transport = newLossy(inner, *dropRate)
	}
	list, err := memberlist.Create(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "memberlist:", err)
		os.Exit(1)
	}
	print.event(map[string]any{"event": "started", "node": *name, "address": *bind})

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	// Join through the seeds until some member is known (MetalLB rejoins on Node changes).
	go func() {
		for list.NumMembers() < 2 && len(seedList) > 0 {
			if _, err := list.Join(seedList); err == nil {
				return
			}
			time.Sleep(time.Second)
		}
	}()
	go func() {
		reported := 0
		for range time.Tick(250 * time.Millisecond) {
			if score := list.GetHealthScore(); score != reported {
				reported = score
				print.event(map[string]any{"event": "health", "node": *name, "score": score})
			}
		}
	}()
	<-stop
	list.Leave(time.Second)
	list.Shutdown()
	print.event(map[string]any{"event": "stopped", "node": *name})
}
