# count and the placement arguments of a service.
service "negative" {
  command = ["x"]
  count   = -1                  # ERROR: Invalid count
}

service "huge" {
  command = ["x"]
  count   = 1000000             # ERROR: Invalid count
}

service "fraction" {
  command = ["x"]
  count   = 1.5                 # ERROR: Invalid number
}

service "text" {
  command = ["x"]
  count   = "three"             # ERROR: Incorrect attribute value type
}

service "per-node" {
  command      = ["x"]
  count        = 4
  max_per_node = 0              # ERROR: Invalid max_per_node
}

service "both" {
  command    = ["x"]
  count      = 2
  exclusive  = true
  stop_after = "30s"            # ERROR: stop_after with exclusive
}

service "not-bool" {
  command   = ["x"]
  count     = 2
  exclusive = "maybe"           # ERROR: Incorrect attribute value type
}

service "bare-number" {
  command    = ["x"]
  count      = 2
  stop_after = 30               # ERROR: Invalid duration
}

service "leader" {
  command = ["x"]
  count   = 3
  leader {                      # ERROR: Leader with count
    mode = "tag"
  }
}

service "fixed-id" {
  command = ["x"]
  id      = "fixed"             # ERROR: Service ID with count
  count   = 2
}

# Without count, placement is an error, reported once at the first item.
service "no-count" {
  command      = ["x"]
  max_per_node = 2              # ERROR: Placement without count
  exclusive    = true

  constraint {
    attribute = "node.meta.zone"
    value     = "z1"
  }
}

service "no-count-block" {
  command = ["x"]

  reschedule {                  # ERROR: Placement without count
    delay = "1s"
  }
  restart {
    on_exhausted = "reschedule" # ERROR: Reschedule without count
  }
}

service "two-reschedules" {
  command = ["x"]
  count   = 1
  reschedule {}
  reschedule {}                 # ERROR: Duplicate reschedule block
}

service "algorithm" {
  command             = ["x"]
  count               = 2
  scheduler_algorithm = "fullest" # ERROR: Invalid scheduler_algorithm
}
