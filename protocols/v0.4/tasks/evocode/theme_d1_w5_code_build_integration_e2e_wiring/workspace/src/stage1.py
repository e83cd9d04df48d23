# stage 1 (round 1)
# theme_d1_w5_code_build_integration_e2e_wiring-stage1-keep
