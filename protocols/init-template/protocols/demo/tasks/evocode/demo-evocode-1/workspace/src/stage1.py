# stage 1 (round 1)
# demo-evocode-1-stage1-keep
