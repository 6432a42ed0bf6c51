package command

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/mariposa-sh/mariposa/fleet/placement"
	"github.com/mariposa-sh/mariposa/schema"
)

// capacityEnv overrides the detected capacity of the host
// ("cpu=2000,memory=1024"): for tests and containers, where the host's
// cores and memory are not what the node should offer.
const capacityEnv = "MARIPOSA_CAPACITY"

const reserveFlagHelp = `  -reserve=cpu=MILLICORES,memory=MIB
                     Keep this much of the host's capacity out of placement
                     (for the system and whatever mariposa does not run):
                     a -cluster node offers its cores x 1000 millicores and
                     its MemTotal in MiB, less the reserve, less what its
                     own services (those without a count) reserve, to the
                     slots of units with a resources block.
                     $MARIPOSA_CAPACITY (same form) replaces the detected
                     capacity (tests, containers).`

// nodeCapacity is what this host offers the fleet: its capacity (detected,
// or $MARIPOSA_CAPACITY), the operator's reserve, and what cfg's own
// services reserve.
func nodeCapacity(reserve placement.Reservation, cfg *schema.Config) (placement.Capacity, error) {
	total, err := hostCapacity()
	if err != nil {
		return placement.Capacity{}, err
	}
	if reserve.CPU > total.CPU || reserve.Memory > total.Memory {
		return placement.Capacity{}, fmt.Errorf("-reserve %s is more than this host has (%s)", reserve, total)
	}
	return placement.Capacity{Total: total, Reserve: reserve, Local: placement.LocalReservation(cfg)}, nil
}

// hostCapacity is $MARIPOSA_CAPACITY when set, else the cores this process
// may run on × 1000 and /proc/meminfo's MemTotal in MiB.
func hostCapacity() (placement.Reservation, error) {
	if v := os.Getenv(capacityEnv); v != "" {
		r, err := placement.ParseReservation(v)
		if err != nil {
			return r, fmt.Errorf("$%s: %w", capacityEnv, err)
		}
		return r, nil
	}
	mem, err := memTotal("/proc/meminfo")
	if err != nil {
		return placement.Reservation{}, err
	}
	return placement.Reservation{CPU: runtime.NumCPU() * 1000, Memory: mem}, nil
}

// memTotal reads MemTotal (kB) from a meminfo file, in MiB.
func memTotal(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read the host's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
		if err != nil {
			return 0, fmt.Errorf("%s: MemTotal %q: %w", path, strings.TrimSpace(rest), err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("%s has no MemTotal", path)
}

// reserveFlag is -reserve.
type reserveFlag struct {
	r   placement.Reservation
	set bool
}

func (f *reserveFlag) String() string { return "" }
func (f *reserveFlag) Set(s string) error {
	r, err := placement.ParseReservation(s)
	if err != nil {
		return fmt.Errorf("-reserve: %w", err)
	}
	f.r, f.set = r, true
	return nil
}
