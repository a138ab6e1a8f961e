package dataplane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// cniConfig is the network configuration a node's Pods get: the ptp plugin
// (a veth pair per Pod, the node routing to it) with host-local addresses
// of the node's Pod range, written down under dir.
func (n *Node) cniConfig() []byte {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "localkube-" + n.Cluster,
		"type":       "ptp",
		"ipMasq":     false,
		"mtu":        1500,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": n.PodCIDR.String()}}},
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"dataDir": filepath.Join(n.plane.dir, "cni", n.Cluster),
		},
	}
	data, _ := json.Marshal(conf) // maps of strings always marshal
	return data
}

// cni runs the ptp plugin inside the node's namespace, as a container
// runtime on the node would, for the Pod namespace podNS.
func (n *Node) cni(command, id, podNS string) ([]byte, error) {
	cmd := exec.Command("ip", "netns", "exec", n.NetNS, filepath.Join(CNIDir, "ptp"))
	cmd.Env = []string{
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=" + id,
		"CNI_NETNS=" + nsPath(podNS),
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + CNIDir,
		"PATH=" + os.Getenv("PATH"),
	}
	cmd.Stdin = bytes.NewReader(n.cniConfig())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("CNI %s for %s: %w: %s %s", command, podNS, err, bytes.TrimSpace(out), bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// addPodNetwork makes the network namespace podNS, wires it to the node
// with CNI and returns the Pod's address.
func (n *Node) addPodNetwork(id, podNS string) (netip.Addr, error) {
	if err := addNetns(podNS); err != nil {
		return netip.Addr{}, err
	}
	out, err := n.cni("ADD", id, podNS)
	if err != nil {
		return netip.Addr{}, err
	}
	var result struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &result); err != nil || len(result.IPs) == 0 {
		return netip.Addr{}, fmt.Errorf("CNI ADD for %s: no address in %q", podNS, out)
	}
	prefix, err := netip.ParsePrefix(strings.TrimSpace(result.IPs[0].Address))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("CNI ADD for %s: %w", podNS, err)
	}
	return prefix.Addr(), nil
}

// removePodNetwork gives the Pod's address back and removes its namespace.
func (n *Node) removePodNetwork(id, podNS string) error {
	_, cniErr := n.cni("DEL", id, podNS)
	if err := deleteNetns(podNS); err != nil {
		return err
	}
	return cniErr
}
