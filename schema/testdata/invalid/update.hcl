# update blocks: rolling updates of cluster units.
service "api" {
  command = ["x"]
  count   = 3

  update {
    max_parallel      = -1       # ERROR: Invalid max_parallel
    health_check      = "check"  # ERROR: Invalid health_check
    min_healthy_time  = "10"     # ERROR: Invalid duration
    healthy_deadline  = "0s"     # ERROR: Invalid healthy_deadline
    progress_deadline = "-1m"    # ERROR: Invalid duration
    canary            = 20000    # ERROR: Invalid canary
    auto_promote      = "yes"    # ERROR: Incorrect attribute value type
    auto_revert       = true
    max_paralel       = 2        # ERROR: Unsupported argument
    stagger           = "30s"    # ERROR: Unsupported argument
  }
}

service "deadlines" {
  command = ["x"]
  count   = 2

  update {
    min_healthy_time  = "1m"
    healthy_deadline  = "1m"     # ERROR: healthy_deadline too short
    progress_deadline = "30s"    # ERROR: progress_deadline too short
  }
}

service "progress" {
  command = ["x"]
  count   = 2

  update {
    healthy_deadline  = "10m"
    progress_deadline = "10m"    # ERROR: progress_deadline too short
  }
}

service "defaults" {
  command = ["x"]
  count   = 2

  update {
    min_healthy_time = "5m"      # ERROR: healthy_deadline too short
  }
}

service "default-progress" {
  command = ["x"]
  count   = 2

  update {
    healthy_deadline = "15m"     # ERROR: progress_deadline too short
  }
}

service "promote" {
  command = ["x"]
  count   = 2

  update {
    auto_promote = true          # ERROR: auto_promote without canary
    health_check = "task_states" # ERROR: Invalid health_check
  }
}

service "no-count" {
  command = ["x"]

  update {                       # ERROR: Placement without count
    max_parallel = 2
  }
}

service "two-updates" {
  command = ["x"]
  count   = 2
  update {}
  update {}                      # ERROR: Duplicate update block
}

group "shop" {
  count = 2
  update {
    canary = -1                  # ERROR: Invalid canary
  }
  update {                       # ERROR: Duplicate update block
    canary = 1
  }

  service "web" {
    command = ["x"]
    update {                     # ERROR: Placement on a group member
      max_parallel = 1
    }
  }
}

group "no-count" {
  update {}                      # ERROR: Placement without count

  service "a" {
    command = ["x"]
  }
}
