# A group moves as one: its placement is set on the group, never on a member.
group "shop" {
  count = 2

  service "web" {
    command = ["x"]
    count   = 2                 # ERROR: Placement on a group member
    id      = "web"             # ERROR: Service ID with count

    constraint {                # ERROR: Placement on a group member
      attribute = "node.meta.zone"
      value     = "z1"
    }
    max_per_node = 1            # ERROR: Placement on a group member
    leader {}                   # ERROR: Leader with count

    restart {
      on_exhausted = "reschedule"
    }
  }

  service "worker" {
    command = ["x"]
    spread {                    # ERROR: Placement on a group member
      attribute = "node.datacenter"
    }
    exclusive  = true           # ERROR: Placement on a group member
    stop_after = "1m"           # ERROR: Placement on a group member
    reschedule {}               # ERROR: Placement on a group member
    affinity {                  # ERROR: Placement on a group member
      attribute = "node.meta.disk"
      value     = "ssd"
    }
  }

  constraint {
    attribute = "service.worker" # ERROR: Constraint on itself
  }
}

group "no-count" {
  affinity {                    # ERROR: Placement without count
    attribute = "node.meta.disk"
    value     = "ssd"
  }
  stop_after = "1m"

  service "a" {
    command = ["x"]
    restart {
      on_exhausted = "reschedule" # ERROR: Reschedule without count
    }
  }
}

group "dup" {
  count = 1
  reschedule {}
  reschedule {}                 # ERROR: Duplicate reschedule block
  service "b" {
    command = ["x"]
  }
}
