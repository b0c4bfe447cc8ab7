# SPDX-License-Identifier: Apache-2.0
# The trained model out: weights written by prsgd (prsgd local --save-model, prsgd export) load into the PyTorch
# twins (python/prsgd_twins.py) with strict=True and predict what `prsgd eval` / `prsgd predict` do; weights the
# twins write load into prsgd. Debian's Python, which has python3-torch.
if(TARGET prsgd AND EXISTS /usr/bin/python3)
  set(_twin ${CMAKE_CURRENT_LIST_DIR}/export/twin_proof.py)
  set(_work ${CMAKE_CURRENT_BINARY_DIR}/export_twin)
  prsgd_scaled_timeout(_timeout 900)
  add_test(NAME export_twin_fmnist_mlp_trained
           COMMAND /usr/bin/python3 ${_twin} --prsgd $<TARGET_FILE:prsgd> --model fmnist-mlp --workdir ${_work}/mlp
                   train --epochs 1)
  add_test(NAME export_twin_kws_cnn_random
           COMMAND /usr/bin/python3 ${_twin} --prsgd $<TARGET_FILE:prsgd> --model kws-cnn --workdir ${_work}/kws random)
  set(_twin_tests export_twin_fmnist_mlp_trained export_twin_kws_cnn_random)
  if(PRSGD_SANITIZERS)
    # Under sanitizers the export paths run once on the small model, checkpoint export included; the
    # convolutional models' numerical agreement with PyTorch is checked by the optimised build, where it
    # takes seconds instead of minutes.
    add_test(NAME export_twin_fmnist_mlp_checkpoint
             COMMAND /usr/bin/python3 ${_twin} --prsgd $<TARGET_FILE:prsgd> --model fmnist-mlp
                     --workdir ${_work}/mlp-checkpoint train --rounds 6 --checkpoint)
    list(APPEND _twin_tests export_twin_fmnist_mlp_checkpoint)
  else()
    add_test(NAME export_twin_fmnist_cnn_trained_and_checkpoint
             COMMAND /usr/bin/python3 ${_twin} --prsgd $<TARGET_FILE:prsgd> --model fmnist-cnn --workdir ${_work}/cnn
                     train --rounds 12 --checkpoint)
    add_test(NAME export_twin_fmnist_resnet8_random
             COMMAND /usr/bin/python3 ${_twin} --prsgd $<TARGET_FILE:prsgd> --model fmnist-resnet8
                     --workdir ${_work}/resnet8 random)
    list(APPEND _twin_tests export_twin_fmnist_cnn_trained_and_checkpoint export_twin_fmnist_resnet8_random)
  endif()
  set_tests_properties(${_twin_tests} PROPERTIES LABELS "integration;process" TIMEOUT ${_timeout})
endif()
