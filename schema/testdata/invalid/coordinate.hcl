# coordinate blocks: template reloads paced across the fleet.
service "a" {
  command = ["x"]

  template {
    contents    = "x"
    destination = "a.conf"
    change_mode = "noop"
    coordinate {                # ERROR: Nothing to coordinate
      max_parallel = 2
    }
  }

  template {
    contents    = "x"
    destination = "b.conf"
    change_mode = "command"
    command     = ["reload"]
    coordinate {}               # ERROR: Nothing to coordinate
  }

  template {
    contents    = "x"
    destination = "c.conf"
    coordinate {
      max_parallel = 0          # ERROR: Invalid max_parallel
    }
  }

  template {
    contents    = "x"
    destination = "d.conf"
    change_mode = "signal"
    coordinate {
      max_parallel = -3         # ERROR: Invalid max_parallel
      max_paralel  = 2          # ERROR: Unsupported argument
    }
    coordinate {}               # ERROR: Duplicate coordinate block
  }

  template {
    contents    = "x"
    destination = "e.conf"
    coordinate {
      max_parallel = "two"      # ERROR: Incorrect attribute value type
    }
  }
}
