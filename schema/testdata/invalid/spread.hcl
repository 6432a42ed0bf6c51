# spread blocks and their targets.
service "api" {
  command = ["x"]
  count   = 10

  spread {                      # ERROR: Spread targets over 100%
    attribute = "node.meta.zone"
    target "z1" {
      percent = 60
    }
    target "z2" {
      percent = 50
    }
  }
  spread {
    attribute = "node.datacenter"
    weight    = 200             # ERROR: Invalid weight
    target "dc1" {
      percent = 101             # ERROR: Invalid percent
    }
    target "dc2" {
      percent = 10
    }
    target "dc2" {              # ERROR: Duplicate spread target
      percent = 10
    }
    target "" {                 # ERROR: Invalid spread target
      percent = 10
    }
  }
  spread {
    attribute = "node.meta.zone"
  }
  spread {                      # ERROR: Duplicate spread
    attribute = "node.meta.zone"
  }
  spread {
    attribute = "service.mysql" # ERROR: Invalid spread attribute
  }
  spread {
    attribute = "node.meta.rack"
    target {                    # ERROR: Missing value for target
      value   = "r1"
      percent = 50
    }
    target "r2" {}              # ERROR: Missing required argument
  }
}
