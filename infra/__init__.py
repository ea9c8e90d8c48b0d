"""Everything that is not Lambda code: the CDK stack and its definition, the local emulator that
runs the same template on moto, and the `toolpipe` command line."""
