module hostpool-operator/bench/barecontroller

go 1.22
