# constraint blocks: attributes, operators and values.
service "api" {
  command = ["x"]
  count   = 3

  constraint {
    attribute = "node.metadata.zone" # ERROR: Invalid constraint attribute
    value     = "z1"
  }
  constraint {
    attribute = "${meta.rack}"  # ERROR: Invalid constraint attribute
    value     = "r1"
  }
  constraint {
    attribute = "attr.kernel.name" # ERROR: Invalid constraint attribute
    value     = "linux"
  }
  constraint {
    attribute = "node.meta."    # ERROR: Invalid constraint attribute
    value     = "x"
  }
  constraint {
    attribute = "service.bad.name" # ERROR: Invalid constraint attribute
  }
  constraint {                  # ERROR: Missing required argument
    value = "x"
  }
  constraint {
    attribute = "node.meta.disk"
    operator  = "==~"           # ERROR: Affinity operator in a constraint
    value     = "ssd"
  }
  constraint {
    attribute = "mariposa.version"
    operator  = "versoin"       # ERROR: Unknown operator
    value     = ">= 1.0"
  }
  constraint {
    attribute = "node.name"
    operator  = "distinct_hosts" # ERROR: Unknown operator
  }
  constraint {
    attribute = "mariposa.version"
    operator  = "version"
    value     = "> = 1"         # ERROR: Invalid version constraint
  }
  constraint {
    attribute = "node.name"
    operator  = "regexp"
    value     = "web-(1"        # ERROR: Invalid regular expression
  }
  constraint {
    attribute = "node.meta.gpu"
    operator  = "is_set"
    value     = "yes"           # ERROR: Unexpected value
  }
  constraint {
    attribute = "node.meta.disks"
    operator  = "set_contains"  # ERROR: Missing value
  }
  constraint {
    attribute = "node.meta.disks"
    operator  = "set_contains"
    value     = "ssd,,nvme"     # ERROR: Invalid set
  }
  constraint {                  # ERROR: Missing value
    attribute = "node.datacenter"
  }
  constraint {
    attribute = "service.mysql"
    operator  = "regexp"        # ERROR: Operator not valid here
    value     = "1"
  }
  constraint {
    attribute = "service.mysql"
    value     = "some"          # ERROR: Invalid value
  }
  constraint {
    attribute = "service.api"   # ERROR: Constraint on itself
    operator  = "!="
  }
  constraint {
    attribute = "node.name"
    value     = "a"
    weight    = 10              # ERROR: Unsupported argument
  }
}
