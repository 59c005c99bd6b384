# SOAP-Muon for the CPU mini reproduction (after config/mini.py): NorMuon's mini departures from the track's recipe
# (config/mini_normuon.py: its decays, the last 2% decayed, AdamW betas 0.9/0.95 and eps 1e-8), the SOAP part as the
# record's. The learning rate is NorMuon's mini rate until the mini's sweep and tuning give its own (results/tune/).
include = ["paper_soap_muon.py"]  # then the mini's own values
learning_rate = 2e-2
weight_decay = 1e-3
weight_decay_1d = 0.1
wsd_decay_frac = 0.02
# the mini's setting where the paper's recipe differs (config/mini.py's, or the default)
beta1_1d = 0.9
eps = 1e-08
