# reschedule blocks.
service "api" {
  command = ["x"]
  count   = 3

  restart {
    on_exhausted = "reschedule"
  }

  reschedule {
    attempts       = -1         # ERROR: Invalid attempts
    interval       = "1h"
    delay          = "1m"
    delay_function = "linear"   # ERROR: Invalid delay_function
    max_delay      = "30s"      # ERROR: max_delay less than delay
    penalty        = "-1m"      # ERROR: Invalid duration
  }
}

service "window" {
  command = ["x"]
  count   = 1

  reschedule {
    attempts = 3                # ERROR: Missing interval
  }
}

service "zero-window" {
  command = ["x"]
  count   = 1

  reschedule {
    attempts        = 3
    interval        = "0s"      # ERROR: Invalid duration
    delay           = "10m"     # ERROR: max_delay less than delay
    node_lost_after = 60        # ERROR: Invalid duration
    nodes_lost_after = "1m"     # ERROR: Unsupported argument
  }
}
