service "a" {
  command = ["x"]
  depends_on "b" {}
  depends_on "nothing" {       # ERROR: Empty dependency condition
    registered = 0
    passing    = 0
  }
}

service "b" {
  command = ["x"]
  depends_on "c" {}
}

service "c" {
  command = ["x"]
  depends_on "a" {             # ERROR: Dependency cycle
    on_lost = "restrat"        # ERROR: Invalid on_lost
  }
}

service "self" {
  command = ["x"]
  depends_on "me" {            # ERROR: Dependency cycle
    service = "self"
  }
  depends_on "x" {
    env_prefix = "1X"          # ERROR: Invalid env_prefix
    timeout    = "forever"     # ERROR: Invalid duration
    registered = -1            # ERROR: Value out of range
  }
  depends_on "x" {}            # ERROR: Duplicate dependency
  depends_on "X" {}            # ERROR: Duplicate dependency env prefix
}
